"""Django's PostgreSQL backend with ChatBridge's pool check (``ENGINE`` of a ``postgres://``
``DATABASE_URL``; see ``base``)."""
