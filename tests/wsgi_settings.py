"""The project's settings without daphne in INSTALLED_APPS: ``manage.py runserver`` is then
Django's own, which speaks WSGI (tests/test_browser_runserver.py)."""

from chatbridge.settings import *  # noqa: F403
from chatbridge.settings import INSTALLED_APPS

INSTALLED_APPS = [app for app in INSTALLED_APPS if app != "daphne"]
