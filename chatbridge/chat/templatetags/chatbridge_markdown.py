"""``{{ text|markdown }}``: the assistant's Markdown as sanitised HTML (see ``chat.markdown``)."""

from __future__ import annotations

from django import template
from django.utils.safestring import SafeString

from chatbridge.chat.markdown import render_markdown

register = template.Library()


@register.filter
def markdown(text: object) -> SafeString:
    return render_markdown("" if text is None else str(text))
