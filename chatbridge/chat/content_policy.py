"""The chat's Content-Security-Policy, sent by django-csp's middleware on every chat page."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from functools import wraps
from typing import Any, TypeVar, cast

from asgiref.sync import iscoroutinefunction
from django.http import HttpRequest, HttpResponseBase

from chatbridge.conf import setting

__all__ = ["chat_policy"]

View = TypeVar("View", bound=Callable[..., Any])


def _with_policy(response: HttpResponseBase) -> HttpResponseBase:
    directives = setting("CHATBRIDGE_CSP")
    if directives is not None:
        # What django-csp's @csp(config) decorator sets: the middleware then sends this policy
        # instead of the project's. Its decorators wrap sync views only, hence this one.
        setattr(response, "_csp_config", dict(directives))  # noqa: B010
    return response


def chat_policy(view: View) -> View:
    """``view`` with the chat's policy (``CHATBRIDGE_CSP``) on its responses, whatever the
    project sets for its own pages; a response with a policy header of its own keeps it."""
    if iscoroutinefunction(view):
        async_view = cast(Callable[..., Awaitable[HttpResponseBase]], view)

        @wraps(view)
        async def wrapped_async(request: HttpRequest, *args: Any, **kwargs: Any) -> Any:
            return _with_policy(await async_view(request, *args, **kwargs))

        return cast(View, wrapped_async)

    @wraps(view)
    def wrapped(request: HttpRequest, *args: Any, **kwargs: Any) -> Any:
        return _with_policy(view(request, *args, **kwargs))

    return cast(View, wrapped)
