"""The payment page of book_flight (its URL question ``payment``), served on this site.

The card number is read from the POST, checked (a test card, Luhn) and dropped: the tool only
ever gets ``PaymentDone(payment_token, last4)``, a random token and the last four digits, so
the number never reaches the chat, the model, the journal, the logs or an MCP client.
"""

from __future__ import annotations

import re
import secrets
from datetime import date
from typing import Any

from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.utils.translation import gettext as _
from django.views.decorators.debug import sensitive_variables

from chatbridge import ElicitValidationError, UrlQuestion
from plugins.book_flight.tool import PaymentDone

__all__ = ["TEST_CARDS", "luhn_ok", "payment_page"]

# Test numbers of the card networks: the only cards this demo takes.
TEST_CARDS = frozenset(
    {
        "4242424242424242",  # Visa
        "4000056655665556",  # Visa debit
        "5555555555554444",  # Mastercard
        "2223003122003222",  # Mastercard (2-series)
        "378282246310005",  # American Express
        "6011111111111117",  # Discover
    }
)
_EXPIRY = re.compile(r"^\s*([0-9]{1,2})\s*/\s*([0-9]{2}|[0-9]{4})\s*$")
_DIGITS = re.compile(r"[0-9]+")  # str.isdigit() takes "²", which int() refuses


@sensitive_variables()  # error reports show no local of these functions: they hold the card
def luhn_ok(number: str) -> bool:
    """The Luhn checksum of a card number (digits only)."""
    if not _DIGITS.fullmatch(number) or not 12 <= len(number) <= 19:
        return False
    total = 0
    for i, digit in enumerate(int(d) for d in reversed(number)):
        if i % 2:
            digit *= 2
            digit -= 9 if digit > 9 else 0
        total += digit
    return total % 10 == 0


@sensitive_variables()
def _errors(name: str, number: str, expiry: str, cvc: str, today: date) -> dict[str, str]:
    errors: dict[str, str] = {}
    if not name.strip():
        errors["name"] = _("Enter the name on the card.")
    if not luhn_ok(number):
        errors["number"] = _("This card number is not valid: check the digits.")
    elif number not in TEST_CARDS:
        errors["number"] = _(
            "This demo takes test cards only, for example 4242 4242 4242 4242; no real card "
            "is charged."
        )
    match = _EXPIRY.match(expiry)
    if match is None or not 1 <= int(match[1]) <= 12:
        errors["expiry"] = _("Enter the expiry date as MM/YY.")
    else:
        year = int(match[2]) % 100 + 2000
        if (year, int(match[1])) < (today.year, today.month):
            errors["expiry"] = _("This card has expired.")
    wanted = 4 if number.startswith(("34", "37")) else 3
    if not (_DIGITS.fullmatch(cvc) and len(cvc) == wanted):
        errors["cvc"] = _("Enter the %(digits)s-digit security code.") % {"digits": wanted}
    return errors


@sensitive_variables()
async def payment_page(request: HttpRequest, question: UrlQuestion) -> HttpResponse:
    """Take a test card; on success report only a token and the last four digits."""
    page: dict[str, Any] = {
        "question": question,
        "amount": question.context.get("amount_usd"),
        "errors": {},
    }
    if request.method != "POST":
        return render(request, "book_flight/payment.html", page)
    name = request.POST.get("name", "")[:100]
    number = re.sub(r"[\s-]", "", request.POST.get("number", ""))[:32]
    expiry = request.POST.get("expiry", "")[:10]
    cvc = request.POST.get("cvc", "").strip()[:8]
    errors = _errors(name, number, expiry, cvc, date.today())
    if errors:  # shown again without the number or the code
        values = {"name": name, "expiry": expiry}
        return render(
            request,
            "book_flight/payment.html",
            {**page, "errors": errors, "values": values},
            status=400,
        )
    done = PaymentDone(payment_token=secrets.token_urlsafe(24), last4=number[-4:])
    del number, cvc
    try:
        await question.complete(done)
    except ElicitValidationError:
        errors = {"form": _("The payment could not be recorded; please try again.")}
        return render(request, "book_flight/payment.html", {**page, "errors": errors}, status=400)
    return render(request, "book_flight/payment_done.html", {**page, "last4": done.last4})
