"""System checks for a deployment: what would otherwise fail only when a page is served."""

from __future__ import annotations

from typing import Any

from django.contrib.staticfiles.storage import ManifestFilesMixin
from django.core.checks import CheckMessage, Error, Tags, register
from django.core.files.storage import storages

__all__ = ["static_files_collected"]


@register(Tags.staticfiles, deploy=True)
def static_files_collected(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    """Production serves collected, hashed static files: without them every page fails."""
    storage = storages["staticfiles"]
    if not isinstance(storage, ManifestFilesMixin) or storage.exists(storage.manifest_name):
        return []
    return [
        Error(
            f"Static files are not collected in {storage.location}.",
            hint="Run `manage.py collectstatic --noinput` (the README's Deployment section "
            "lists every step), or set DJANGO_DEBUG=1 for development.",
            id="chatbridge.E001",
        )
    ]
