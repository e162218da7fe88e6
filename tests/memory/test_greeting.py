"""What a greeting may say aloud and whom it names (``bot.memory.speakable``, ``bot.memory.greeting``); the
whole path, from a call to the next call's join, is tested as members meet it in tests/cogs/test_greetings_cog.py."""

from __future__ import annotations

import pytest

from bot.memory.greeting import checked_follow_up, name_in
from bot.memory.speakable import asks_for_quiet, unsafe_to_say


@pytest.mark.parametrize(
    "line",
    [
        "My doctor says my blood pressure is too high.",
        "I'm seeing a therapist about my anxiety.",
        "Mi médico dice que tengo que operarme.",
        "Ich war krank letzte Woche.",
        "Estou grávida!",
        "My girlfriend and I broke up.",
        "Me divorcié el año pasado.",
        "Meine Schwester heiratet im Mai.",
        "I owe the bank 3000 dollars.",
        "Paid $40 for it.",
        "Tengo muchas deudas.",
        "Meu salário atrasou.",
        "Please keep this between us.",
        "Don't tell anyone about the new job.",
        "Es un secreto.",
        "Das bleibt unter uns.",
    ],
)
def test_health_relationships_money_and_secrets_are_never_said(line: str) -> None:
    assert unsafe_to_say(line)


@pytest.mark.parametrize(
    "line",
    [
        "I have a job interview at Acme on Friday.",
        "I'm flying to Lisbon next week.",
        "El sábado corro mi primera media maratón.",
        "Ich lerne gerade Cello.",
        "Vou começar um curso de fotografia.",
        "How did the interview go?",
    ],
)
def test_everyday_plans_may_be_said(line: str) -> None:
    assert not unsafe_to_say(line)


def test_asking_for_quiet_is_told_apart() -> None:
    assert asks_for_quiet("Keep it between us, please.")
    assert not asks_for_quiet("My doctor called.")


@pytest.mark.parametrize(
    ("text", "name"),
    [
        ("My name is Ana", "Ana"),
        ("The user's name is Ana.", "Ana"),
        ("Call me Noor", "Noor"),
        ("Me llamo Lucía", "Lucía"),
        ("Ich heiße Jörg", "Jörg"),
        ("Meu nome é João", "João"),
        ("The user's sister's name is Lia.", None),
        ("My name is not important", None),
        ("The user plays the cello.", None),
    ],
)
def test_the_name_a_member_goes_by(text: str, name: str | None) -> None:
    assert name_in(text) == name


@pytest.mark.parametrize(
    ("raw", "said"),
    [
        ('{"follow_up": "How did the interview go?"}', "How did the interview go?"),
        ('{"follow_up": ""}', None),
        ('{"follow_up": "How is your blood pressure?"}', None),
        ('{"follow_up": "Ask @everyone how it went"}', None),
        ('{"follow_up": "' + "very " * 40 + 'long?"}', None),
        ("How did it go?", None),
    ],
)
def test_only_a_short_safe_question_is_kept(raw: str, said: str | None) -> None:
    assert checked_follow_up(raw) == said
