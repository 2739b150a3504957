"""Automatic forms (``chatbridge.auto_form``) as Django forms.

A key's JSON Schema becomes a ``django.forms.Form``: strings (with the formats email, uri, date
and date-time, lengths and patterns) as text, email, URL, date and date-time inputs (a textarea
beyond 200 characters), numbers and integers with their bounds, booleans as a checkbox, up to
three choices as radio buttons and more as a select, lists of choices as checkboxes, with
titles as labels, descriptions as help and defaults as initial values. Django draws the widgets
(``required``, ``minlength``, ``min``/``max``, the chosen options after a refusal) and reads the
browser's post back (checkboxes to booleans, several values to a list).

Which answers count is never Django's to decide: the form is not validated. Its read values go
to the key's pydantic model, whose refusals come back as the form's errors, exactly as on every
other transport. Core's ``auto_form`` handler reaches this module through
``use_form_reader`` (set by the app's ``ready``), since ``chatbridge.author`` imports no Django.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from functools import cache
from json import dumps, loads
from typing import Any

from django import forms
from django.forms.utils import ErrorDict, ErrorList
from django.utils.datastructures import MultiValueDict
from django.utils.html import escape
from django.utils.safestring import SafeString

from chatbridge.author.schema import resolve_ref

__all__ = ["AutoField", "auto_fields", "build_form", "read_post"]

RADIO_LIMIT = 3
TEXTAREA_FROM = 200


class DateInput(forms.DateInput):
    input_type = "date"


class DateTimeInput(forms.DateTimeInput):
    input_type = "datetime-local"


def _unwrap_optional(
    schema: dict[str, Any], root: Mapping[str, Any]
) -> tuple[dict[str, Any], bool]:
    """``X | None`` → (X, True); anything else → (schema, False)."""
    options = schema.get("anyOf")
    if isinstance(options, list):
        real = [o for o in options if o.get("type") != "null"]
        if len(real) == 1 and len(real) < len(options):
            rest = {k: v for k, v in schema.items() if k != "anyOf"}
            return {**resolve_ref(real[0], root), **rest}, True
    return schema, False


def _choices(schema: Mapping[str, Any]) -> list[tuple[str, str]]:
    values = schema.get("enum") or [
        o["const"] for o in schema.get("anyOf") or () if isinstance(o, Mapping) and "const" in o
    ]
    return [(str(v), str(v)) for v in values]


def _field(schema: dict[str, Any], root: Mapping[str, Any], required: bool) -> forms.Field:
    """The Django field of one property (not validated: only drawn and read)."""
    label = str(schema.get("title") or "")
    common: dict[str, Any] = {
        "label": label,
        "required": required,
        "help_text": str(schema.get("description") or ""),
        "initial": schema.get("default"),
    }
    choices = _choices(schema)
    kind = schema.get("type")
    if choices:
        if len(choices) <= RADIO_LIMIT:
            return forms.ChoiceField(choices=choices, widget=forms.RadioSelect, **common)
        empty = "Choose…" if required else "—"  # kept after a refusal: an empty stays empty
        return forms.ChoiceField(choices=[("", empty), *choices], **common)
    if kind == "array":
        items = resolve_ref(schema.get("items") or {}, root)
        return forms.MultipleChoiceField(
            choices=_choices(items), widget=forms.CheckboxSelectMultiple, **common
        )
    if kind == "boolean":
        return forms.BooleanField(**{**common, "required": False})
    if kind == "integer":
        return forms.IntegerField(
            min_value=schema.get("minimum"), max_value=schema.get("maximum"), **common
        )
    if kind == "number":
        return forms.FloatField(
            min_value=schema.get("minimum"), max_value=schema.get("maximum"), **common
        )
    lengths: dict[str, Any] = {
        "min_length": schema.get("minLength"),
        "max_length": schema.get("maxLength"),
    }
    field: forms.Field
    fmt = schema.get("format")
    if fmt == "email":
        field = forms.EmailField(**lengths, **common)
    elif fmt == "uri":
        field = forms.URLField(assume_scheme="https", **lengths, **common)
    elif fmt == "date":
        field = forms.DateField(widget=DateInput, **common)
    elif fmt == "date-time":
        field = forms.DateTimeField(widget=DateTimeInput, **common)
    elif int(schema.get("maxLength") or 0) > TEXTAREA_FROM:
        field = forms.CharField(widget=forms.Textarea(attrs={"rows": 3}), **lengths, **common)
    else:
        field = forms.CharField(**lengths, **common)
    if "pattern" in schema:
        field.widget.attrs["pattern"] = schema["pattern"]
    return field


class AutoForm(forms.Form):
    """A form whose errors are the model's refusals: Django's own validation never runs."""

    _errors: ErrorDict | None

    def show_refusals(self, errors: Mapping[str, list[str]]) -> None:
        self._errors = ErrorDict({name: ErrorList(msgs) for name, msgs in errors.items() if msgs})


@cache
def _form_class(schema_text: str) -> type[AutoForm]:
    schema = loads(schema_text)
    required = set(schema.get("required") or ())
    fields: dict[str, forms.Field] = {}
    for name, prop in (schema.get("properties") or {}).items():
        field_schema, optional = _unwrap_optional(resolve_ref(prop, schema), schema)
        field = _field(field_schema, schema, name in required and not optional)
        field.label = field.label or name.replace("_", " ").capitalize()
        fields[name] = field
    return type("AutoForm", (AutoForm,), fields)


def _plain(schema: Mapping[str, Any]) -> str:
    """The schema without the question's context (it changes with every question)."""
    return dumps({k: v for k, v in schema.items() if k != "x-model-context"})


def _multi(data: Mapping[str, Any]) -> MultiValueDict[str, Any]:
    return MultiValueDict({k: v if isinstance(v, list) else [v] for k, v in data.items()})


def build_form(
    schema: Mapping[str, Any],
    values: Mapping[str, Any] | None = None,
    errors: Mapping[str, list[str]] | None = None,
    *,
    prefix_id: str = "af",
) -> AutoForm:
    """The form of ``schema``: showing ``values`` (the last post) if any, else the defaults,
    with ``errors`` (the model's refusals, by field) as its errors. Ids are
    ``<prefix_id>-<field>``."""
    form_class = _form_class(_plain(schema))
    data = _multi(values) if values else None
    form = form_class(data=data, auto_id=f"{prefix_id}-%s")
    if data is not None:
        form.show_refusals(errors or {})  # the model decided; Django would judge differently
    return form


def read_post(schema: Mapping[str, Any], data: Mapping[str, Any]) -> dict[str, Any]:
    """A browser's post as the model reads it, by each field's widget: checkboxes become
    booleans and lists, empty optional inputs are left out (their defaults apply), unknown
    names are dropped."""
    post = _multi(data)
    out: dict[str, Any] = {}
    # The class's fields, read only: a form of its own would deep-copy every field first.
    for name, field in _form_class(_plain(schema)).base_fields.items():
        value = field.widget.value_from_datadict(post, MultiValueDict(), name)
        if isinstance(field, forms.BooleanField | forms.MultipleChoiceField):
            out[name] = value if value is not None else []
        elif (
            value is None
            or value == ""
            and (not field.required or isinstance(field, forms.IntegerField | forms.FloatField))
        ):
            continue
        else:
            out[name] = value
    return out


@dataclass(frozen=True)
class AutoField:
    """One field as ``chatbridge/auto_field.html`` draws it."""

    name: str
    label: str
    kind: str  # "checkbox", "group" (radio buttons, checkboxes) or "input"
    required: bool
    widget: SafeString
    help: str
    help_id: str
    errors: list[str]
    error_id: str

    def for_call(self, call_id: str) -> AutoField:
        """This field, drawn for every call, with ``call_id`` in its ids (escaped in the widget's
        HTML, as Django escapes what it draws; the ids are escaped where they are shown)."""
        return replace(
            self,
            widget=SafeString(self.widget.replace(_CALL, escape(call_id))),
            help_id=self.help_id.replace(_CALL, call_id),
            error_id=self.error_id.replace(_CALL, call_id),
        )


def auto_fields(
    schema: Mapping[str, Any],
    values: Mapping[str, Any] | None,
    errors: Mapping[str, list[str]] | None,
    call_id: str,
) -> list[AutoField]:
    """The fields of the form, each widget drawn by Django with its help and errors named
    (``aria-describedby``), refused ones marked (``aria-invalid``, the first takes the focus).

    A question shown for the first time (no values, no errors) is drawn once per schema and
    the call's id put into its ids: Django's widget templates cost more than the rest of the
    question's card, and every call of a key draws the same fields."""
    if values or errors:
        return _drawn(schema, values, errors, call_id)
    return [field.for_call(call_id) for field in _blank(_plain(schema))]


_CALL = "\x00call\x00"  # where a call's id goes in fields drawn for every call


@cache
def _blank(schema_text: str) -> tuple[AutoField, ...]:
    return tuple(_drawn(loads(schema_text), None, None, _CALL))


def _drawn(
    schema: Mapping[str, Any],
    values: Mapping[str, Any] | None,
    errors: Mapping[str, list[str]] | None,
    call_id: str,
) -> list[AutoField]:
    form = build_form(schema, values, errors, prefix_id=f"af-{call_id}")
    drawn = []
    for bound in form:
        base = f"af-{call_id}-{bound.name}"
        messages = list((errors or {}).get(bound.name) or ())
        help_id, error_id = f"{base}-help", f"{base}-error"
        described = [i for i, on in ((help_id, bound.help_text), (error_id, messages)) if on]
        widget = bound.field.widget
        kind = (
            "group"
            if isinstance(widget, forms.RadioSelect | forms.CheckboxSelectMultiple)
            else "checkbox"
            if isinstance(widget, forms.CheckboxInput)
            else "input"
        )
        attrs: dict[str, Any] = {}
        if described and kind != "group":
            attrs["aria-describedby"] = " ".join(described)
        if messages:
            attrs["data-autofocus"] = True
        drawn.append(
            AutoField(
                name=bound.name,
                label=str(bound.label),
                kind=kind,
                required=bound.field.required,
                widget=bound.as_widget(attrs=attrs),
                help=str(bound.help_text),
                help_id=help_id,
                errors=messages,
                error_id=error_id,
            )
        )
    return drawn
