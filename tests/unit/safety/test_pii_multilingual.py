# ruff: noqa: RUF001  (the test texts are Chinese and Russian, full-width punctuation included)
"""PII redaction for Chinese and Russian users and for phone numbers of any country: each
identifier is replaced inside Chinese, Russian and English sentences, the text around it is
kept to the character, and numbers that only look like one (a wrong check digit, a wrong
length, a piece of a longer number) are left as they are."""

from __future__ import annotations

import pytest

from memmachine.safety import (
    Redactor,
    cn_resident_id_is_valid,
    iban_is_valid,
    inn_is_valid,
    snils_is_valid,
)

CN_ID = "11010519491231002X"
CN_ID_DIGIT = "440305199003072319"
#: A resident identity card number that also passes Luhn: still a national id, not a card.
CN_ID_LUHN = "440305199003070356"
INN_PERSON = "500100732259"
INN_COMPANY = "7707083893"
SNILS = "112-233-445 95"
#: 13912345678 in the full-width digits a Chinese input method types.
FULL_WIDTH_MOBILE = "\uff11\uff13\uff19\uff11\uff12\uff13\uff14\uff15\uff16\uff17\uff18"


@pytest.fixture
def redactor() -> Redactor:
    return Redactor()


@pytest.mark.parametrize(
    ("text", "expected", "kind"),
    [
        # Chinese resident identity card numbers
        (f"我的身份证号是{CN_ID}。", "我的身份证号是[NATIONAL_ID]。", "national_id"),
        (f"身份证：{CN_ID_DIGIT}，请核对", "身份证：[NATIONAL_ID]，请核对", "national_id"),
        (f"身份证{CN_ID_LUHN}", "身份证[NATIONAL_ID]", "national_id"),
        ("id 11010519491231002x, thanks", "id [NATIONAL_ID], thanks", "national_id"),
        ("号码 110105 19491231 002X 已登记", "号码 [NATIONAL_ID] 已登记", "national_id"),
        (f"мой китайский ID {CN_ID}.", "мой китайский ID [NATIONAL_ID].", "national_id"),
        # Chinese mobiles and landlines
        ("我的手机号是13912345678。", "我的手机号是[PHONE]。", "phone"),
        ("电话+86 139 1234 5678，晚上打", "电话[PHONE]，晚上打", "phone"),
        ("打(+86)139-1234-5678", "打[PHONE]", "phone"),
        ("联系8613912345678或008615012345678", "联系[PHONE]或[PHONE]", "phone"),
        (f"手机：{FULL_WIDTH_MOBILE}", "手机：[PHONE]", "phone"),
        ("call my Beijing cell 139-1234-5678 today", "call my Beijing cell [PHONE] today", "phone"),
        ("办公室010-12345678，深圳0755-87654321", "办公室[PHONE]，深圳[PHONE]", "phone"),
        ("总机（0755）87654321。", "总机[PHONE]。", "phone"),
        # Russian passports (after a label)
        ("мой паспорт 45 06 123456, выдан", "мой паспорт [NATIONAL_ID], выдан", "national_id"),
        ("Паспорт: серия 4506 № 123456.", "Паспорт: серия [NATIONAL_ID].", "national_id"),
        ("данные паспорта 4506123456", "данные паспорта [NATIONAL_ID]", "national_id"),
        ("серия 4506 номер 123456", "серия [NATIONAL_ID]", "national_id"),
        ("my passport is 4506 123456", "my passport is [NATIONAL_ID]", "national_id"),
        ("我的俄罗斯passport 4506 123456。", "我的俄罗斯passport [NATIONAL_ID]。", "national_id"),
        # INN
        (f"ИНН {INN_PERSON}", "ИНН [NATIONAL_ID]", "national_id"),
        (f"инн:{INN_COMPANY}, КПП 773601001", "инн:[NATIONAL_ID], КПП 773601001", "national_id"),
        (f"его номер {INN_PERSON} в ФНС", "его номер [NATIONAL_ID] в ФНС", "national_id"),
        (f"tax id (INN) {INN_COMPANY}", "tax id (INN) [NATIONAL_ID]", "national_id"),
        (f"税号{INN_PERSON}。", "税号[NATIONAL_ID]。", "national_id"),
        # SNILS
        (f"СНИЛС {SNILS}", "СНИЛС [NATIONAL_ID]", "national_id"),
        ("мой снилс 11223344595.", "мой снилс [NATIONAL_ID].", "national_id"),
        (f"номер {SNILS} в ПФР", "номер [NATIONAL_ID] в ПФР", "national_id"),
        ("SNILS 112-233-445-95 ok", "SNILS [NATIONAL_ID] ok", "national_id"),
        # IBANs of any country, with or without spaces
        ("我的IBAN是DE89370400440532013000。", "我的IBAN是[IBAN]。", "iban"),
        ("мой IBAN: FR76 3000 6000 0112 3456 7890 189", "мой IBAN: [IBAN]", "iban"),
        ("pay NL91ABNA0417164300 or CH93 0076 2011 6238 5295 7", "pay [IBAN] or [IBAN]", "iban"),
        ("счёт KZ86125KZT5004100100 в Алматы", "счёт [IBAN] в Алматы", "iban"),
        ("conta BR1500000000000010932840814P2.", "conta [IBAN].", "iban"),
        # international and national phone formats
        ("звоните +7 (495) 123-45-67 вечером", "звоните [PHONE] вечером", "phone"),
        ("мобильный 8 (916) 123-45-67.", "мобильный [PHONE].", "phone"),
        ("или 8-916-123-45-67, или 89161234567", "или [PHONE], или [PHONE]", "phone"),
        ("北京办公室+86 10 1234 5678。", "北京办公室[PHONE]。", "phone"),
        ("London +44 20 7946 0958", "London [PHONE]", "phone"),
        ("(+44) 20 7946 0958 is the desk", "[PHONE] is the desk", "phone"),
        ("Berlin +49 30 123456.", "Berlin [PHONE].", "phone"),
        ("Paris: +33 1 23 45 67 89", "Paris: [PHONE]", "phone"),
        ("印度同事+91 98765 43210", "印度同事[PHONE]", "phone"),
        # kinds that existed before, next to Chinese text
        ("邮箱john.doe@example.com，谢谢", "邮箱[EMAIL]，谢谢", "email"),
        ("卡号4111111111111111。", "卡号[CARD]。", "card"),
        ("Карта 4111 1111 1111 1111.", "Карта [CARD].", "card"),
    ],
)
def test_each_identifier_is_replaced_and_the_sentence_kept(
    redactor: Redactor, text: str, expected: str, kind: str
) -> None:
    result = redactor.redact(text)
    assert result.text == expected
    assert set(result.found) == {kind}
    assert redactor.redact(result.text).text == result.text  # a second pass changes nothing


@pytest.mark.parametrize(
    "text",
    [
        # resident ids: bad check character, impossible date, unknown province, lengths
        "我的身份证号是110105194912310021。",
        "订单号110105194913310021已发货",  # month 13
        "编号00010519491231002X",  # province 00
        "编号1101051949123100。",  # 16 digits
        "编号911010519491231002X。",  # a longer number holding a valid id
        "编号11010519491231002X5",
        "ticket AB11010519491231002X",
        # mobiles: wrong prefix or length, inside longer numbers
        "订单12912345678已发货",  # 12x is no mobile prefix
        "流水号1391234567890",  # 13 digits, not +86
        "单号913912345678",
        # passports: no label, or too far from one
        "номер заказа 4506 123456",
        "заказ 4506123456 оплачен",
        "паспорт продлил, а билет 1234 56789 потерял",  # wrong grouping
        # INN: bad check digits, 10 digits without a label
        "ИНН 500100732258",
        "номер 500100732258 в заказе",
        "номер 7707083893 в заказе",
        "ИНН 77070838931",  # 11 digits
        "request 550e8400-e29b-41d4-a716-500100732259 failed",  # a UUID's last group
        # SNILS: bad check number; 11 digits with no label
        "СНИЛС 112-233-445 96",
        "код 112-233-445 96",
        "трек 11223344595",
        # IBANs: bad check digits, wrong length for the country
        "IBAN DE89370400440532013001",
        "IBAN DE8937040044053201300",
        # phones: too short, dates and versions
        "我们在2024-01-15见面，版本v1.2.3",
        "Berlin +49 30 12",
        "8 916 123",
        "встреча 15.01.2024 в 8.30",
        "这个数字是12345",
    ],
)
def test_lookalikes_are_left_alone(redactor: Redactor, text: str) -> None:
    result = redactor.redact(text)
    assert result.text == text
    assert result.found == {}


def test_a_chinese_message_with_every_kind_keeps_its_words(redactor: Redactor) -> None:
    text = (
        f"你好，我叫李雷，身份证号{CN_ID}，手机13912345678，"
        "邮箱lilei@example.cn，银行账户DE89 3704 0044 0532 0130 00。谢谢！"
    )
    result = redactor.redact(text)
    assert result.text == (
        "你好，我叫李雷，身份证号[NATIONAL_ID]，手机[PHONE]，邮箱[EMAIL]，银行账户[IBAN]。谢谢！"
    )
    assert result.found == {"national_id": 1, "phone": 1, "email": 1, "iban": 1}


def test_a_russian_message_with_every_kind_keeps_its_words(redactor: Redactor) -> None:
    text = (
        "Меня зовут Иван. Паспорт 45 06 123456, ИНН 500100732259, СНИЛС 112-233-445 95, "
        "телефон +7 (916) 123-45-67."
    )
    result = redactor.redact(text)
    assert result.text == (
        "Меня зовут Иван. Паспорт [NATIONAL_ID], ИНН [NATIONAL_ID], СНИЛС [NATIONAL_ID], "
        "телефон [PHONE]."
    )
    assert result.found == {"national_id": 3, "phone": 1}


def test_only_the_configured_kinds_run_for_the_new_identifiers() -> None:
    text = f"身份证{CN_ID}，手机13912345678"
    assert Redactor(["phone"]).redact(text).text == f"身份证{CN_ID}，手机[PHONE]"
    assert Redactor(["national_id"]).redact(text).text == "身份证[NATIONAL_ID]，手机13912345678"


def test_check_digits() -> None:
    assert cn_resident_id_is_valid(CN_ID)
    assert cn_resident_id_is_valid(CN_ID.lower())
    assert cn_resident_id_is_valid("110105 19491231 002X")
    assert not cn_resident_id_is_valid("110105194912310021")
    assert not cn_resident_id_is_valid("11010518991231002X")  # born 1899
    assert not cn_resident_id_is_valid("11010519490230002X")  # 30 February
    assert inn_is_valid(INN_PERSON)
    assert inn_is_valid(INN_COMPANY)
    assert not inn_is_valid("500100732250")  # the 12th digit
    assert not inn_is_valid("500100732209")  # the 11th digit
    assert not inn_is_valid("7707083894")
    assert not inn_is_valid("0007083893")  # region 00
    assert not inn_is_valid("77070838930")
    assert snils_is_valid(SNILS)
    assert snils_is_valid("987-654-321 83")
    assert snils_is_valid("11223344595")
    assert not snils_is_valid("112-233-445 59")
    assert not snils_is_valid("111-111-111 45")  # the same digit nine times
    assert iban_is_valid("KZ86125KZT5004100100")
    assert iban_is_valid("BR1500000000000010932840814P2")
    assert not iban_is_valid("KZ86125KZT500410010")  # one character short for KZ


@pytest.mark.parametrize(
    "chunk",
    ["1", "13", "1 ", "+86 ", "(+86)", "паспорт ", "паспорт 4506 ", "ИНН ", "СНИЛС 1", "1-"],
)
def test_adversarial_100kb_inputs_finish(redactor: Redactor, chunk: str) -> None:
    text = chunk * (100_000 // len(chunk))
    assert isinstance(redactor.redact(text).text, str)
