"""``{{ text|markdown }}``: the assistant's Markdown as sanitised HTML (see ``chat.markdown``);
``{{ text|markdown_as_streamed }}``: a reply stopped while it was written, as it was shown (its
half-written end healed the way the stream showed it: ``chat.markdown_stream``)."""

from __future__ import annotations

from django import template
from django.utils.safestring import SafeString

from chatbridge.chat.markdown import render_markdown
from chatbridge.chat.markdown_stream import render_tail

register = template.Library()


@register.filter
def markdown(text: object) -> SafeString:
    return render_markdown("" if text is None else str(text))


@register.filter
def markdown_as_streamed(text: object) -> SafeString:
    return SafeString(render_tail("" if text is None else str(text)))
