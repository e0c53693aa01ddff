"""PII redaction: what each detector replaces, what it leaves alone, and its checksums."""

from __future__ import annotations

import pytest

from memmachine.config import SafetySettings
from memmachine.safety import (
    PII_KINDS,
    Redactor,
    iban_is_valid,
    luhn_is_valid,
    ssn_is_valid,
)


@pytest.fixture
def redactor() -> Redactor:
    return Redactor()


@pytest.mark.parametrize(
    ("text", "expected", "kind"),
    [
        ("write to john.doe+news@example.co.uk today", "write to [EMAIL] today", "email"),
        ("mail: A_B%c@sub-domain.example.org.", "mail: [EMAIL].", "email"),
        ("call +44 20 7946 0958 tomorrow", "call [PHONE] tomorrow", "phone"),
        ("call +1 (555) 123-4567", "call [PHONE]", "phone"),
        ("+49-30-1234567 is the office", "[PHONE] is the office", "phone"),
        ("ring (555) 123-4567", "ring [PHONE]", "phone"),
        ("ring 555-123-4567 or 555.123.4567", "ring [PHONE] or [PHONE]", "phone"),
        ("UK mobile 07700 900123", "UK mobile [PHONE]", "phone"),
        ("office 020 7946 0958", "office [PHONE]", "phone"),
        ("portable 06 12 34 56 78", "portable [PHONE]", "phone"),
        ("visa 4111 1111 1111 1111 exp 12/27", "visa [CARD] exp 12/27", "card"),
        ("visa 4111-1111-1111-1111", "visa [CARD]", "card"),
        ("mc 5500000000000004", "mc [CARD]", "card"),
        ("amex 3782 822463 10005", "amex [CARD]", "card"),
        ("iban GB82 WEST 1234 5698 7654 32.", "iban [IBAN].", "iban"),
        ("DE89370400440532013000 is mine", "[IBAN] is mine", "iban"),
        ("account no. 12345678", "account no. [ACCOUNT]", "account"),
        ("Acct #: 0012-3456-7890", "Acct #: [ACCOUNT]", "account"),
        ("my account number 987654321012", "my account number [ACCOUNT]", "account"),
        ("ssn 123-45-6789", "ssn [NATIONAL_ID]", "national_id"),
        ("NI number AB 12 34 56 C", "NI number [NATIONAL_ID]", "national_id"),
        ("NI QQ123456C? no: JG103759A", "NI QQ123456C? no: [NATIONAL_ID]", "national_id"),
        ("SIN 130-692-544", "SIN [NATIONAL_ID]", "national_id"),
        ("DNI 12345678Z", "DNI [NATIONAL_ID]", "national_id"),
        ("NIE X1234567L", "NIE [NATIONAL_ID]", "national_id"),
    ],
)
def test_each_detector_replaces_what_it_is_for(
    redactor: Redactor, text: str, expected: str, kind: str
) -> None:
    result = redactor.redact(text)
    assert result.text == expected
    assert set(result.found) == {kind}


@pytest.mark.parametrize(
    "text",
    [
        "the release is v1.2.3 and 10.0.19045",
        "we met on 2024-01-15 at 12:30, or 15.01.2024 / 01/15/2024",
        "order 4111111111111112 shipped",  # fails Luhn
        "order number 1234567890123 shipped",  # 13 digits, fails Luhn
        "tracking 0000 0000 0000 0000",  # Luhn-valid but all the same digit
        "room 1234, extension 5678, pin 424242",
        "GB82 WEST 1234 5698 7654 33",  # bad IBAN check digits
        "666-12-3456 and 900-12-3456 and 123-00-4567 and 123-45-0000",  # not issued
        "GB 12 34 56 C and BG123456A",  # unused NI prefixes
        "SIN 130-692-545",  # fails Luhn
        "DNI 12345678A",  # wrong control letter
        "an account of what happened in 2023",
        "the user @alice mentioned it",
        "population 1 234 567",
        "isbn 978-3-16-148410-0",
        "score 3-1, 120/80 mmHg",
    ],
)
def test_ordinary_numbers_and_text_are_left_alone(redactor: Redactor, text: str) -> None:
    result = redactor.redact(text)
    assert result.text == text
    assert result.found == {}


def test_counts_every_kind_in_one_text(redactor: Redactor) -> None:
    text = (
        "Reach me at a@b.io or c@d.io, +1 415 555 0100, card 4111 1111 1111 1111, SSN 123-45-6789"
    )
    result = redactor.redact(text)
    assert result.found == {"email": 2, "phone": 1, "card": 1, "national_id": 1}
    for secret in ("a@b.io", "c@d.io", "415 555 0100", "4111", "6789"):
        assert secret not in result.text


def test_only_the_configured_kinds_run() -> None:
    result = Redactor(["email"]).redact("a@b.io 123-45-6789")
    assert result.text == "[EMAIL] 123-45-6789"
    assert Redactor([]).redact("a@b.io").text == "a@b.io"
    with pytest.raises(ValueError, match="unknown PII kind"):
        Redactor(["email", "dna"])


def test_nested_json_values_are_redacted_and_keys_kept(redactor: Redactor) -> None:
    value = {
        "contact": {"email": "x@y.com", "phones": ["555-123-4567", "n/a"]},
        "a@b.io": 3,
        "ok": True,
        "ratio": 0.5,
        "none": None,
        "pairs": ("ssn 123-45-6789",),
    }
    result = redactor.redact_json(value)
    assert result.value == {
        "contact": {"email": "[EMAIL]", "phones": ["[PHONE]", "n/a"]},
        "a@b.io": 3,
        "ok": True,
        "ratio": 0.5,
        "none": None,
        "pairs": ["ssn [NATIONAL_ID]"],
    }
    assert result.found == {"email": 1, "phone": 1, "national_id": 1}
    assert value["contact"] == {"email": "x@y.com", "phones": ["555-123-4567", "n/a"]}


def test_checksums() -> None:
    assert luhn_is_valid("4111111111111111")
    assert not luhn_is_valid("4111111111111112")
    assert not luhn_is_valid("41x1")
    assert iban_is_valid("GB82 WEST 1234 5698 7654 32")
    assert iban_is_valid("de89370400440532013000")
    assert not iban_is_valid("GB82WEST1234569876543")  # wrong length for GB
    assert not iban_is_valid("DE89370400440532013001")
    assert ssn_is_valid("123", "45", "6789")
    for parts in (("000", "45", "6789"), ("666", "45", "6789"), ("987", "65", "4320")):
        assert not ssn_is_valid(*parts)
    assert not ssn_is_valid("123", "00", "6789")
    assert not ssn_is_valid("123", "45", "0000")


@pytest.mark.parametrize(
    "chunk",
    [
        "a",
        "a.",
        "a@",
        "a@b.",
        "1",
        "1 ",
        "1-",
        "+1 ",
        "0 ",
        "(1) ",
        "GB82 ",
        "account no. 1 ",
        "AB 12 ",
        "12345678",
    ],
)
def test_adversarial_100kb_inputs_finish(redactor: Redactor, chunk: str) -> None:
    text = chunk * (100_000 // len(chunk))
    result = redactor.redact(text)
    assert isinstance(result.text, str)


def test_settings_default_to_every_kind_and_parse_a_comma_list(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    settings = SafetySettings()
    assert settings.redact_pii
    assert settings.block_injected_facts
    assert settings.pii_kinds == list(PII_KINDS)
    monkeypatch.setenv("MEMMACHINE_SAFETY_PII_KINDS", "email, phone")
    monkeypatch.setenv("MEMMACHINE_SAFETY_REDACT_PII", "false")
    settings = SafetySettings()
    assert settings.pii_kinds == ["email", "phone"]
    assert not settings.redact_pii
    monkeypatch.setenv("MEMMACHINE_SAFETY_PII_KINDS", '["card"]')
    assert SafetySettings().pii_kinds == ["card"]
    monkeypatch.setenv("MEMMACHINE_SAFETY_PII_KINDS", "email,dna")
    with pytest.raises(ValueError, match="unknown PII kind"):
        SafetySettings()
