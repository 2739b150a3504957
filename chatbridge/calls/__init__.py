"""The call runtime: a ``PluginSession`` per tool call, its open ``Question``, its context and
journal, its ``Outcome``, and the one drive loop that carries it to a host. No web imports."""
