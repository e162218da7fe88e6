"""Facts read to the member in the second person, not like notes about a stranger."""

from __future__ import annotations

import pytest

from bot.memory.wording import second_person


@pytest.mark.parametrize(
    ("stored", "shown"),
    [
        ("The user's name is Noor.", "Your name is Noor."),
        ("The user is learning Portuguese", "You are learning Portuguese"),
        ("The user lives in Leeds with their partner.", "You live in Leeds with their partner."),
        ("The user teaches chemistry at St Mary's", "You teach chemistry at St Mary's"),
        ("The user studies law", "You study law"),
        ("The user has two cats, Miso and Tofu", "You have two cats, Miso and Tofu"),
        ("The user also plays the cello", "You also play the cello"),
        ("The user was born on 1990-04-12", "You were born on 1990-04-12"),
        ("Their sister Maren lives in Tromso", "Your sister Maren lives in Tromso"),
        ("They live in York", "You live in York"),
        ("They are vegetarian", "You are vegetarian"),
        (
            "The user's dog is called Biscuit and likes the user's garden",
            "Your dog is called Biscuit and likes your garden",
        ),
        ("The user's partner Sam works at the user's bakery", "Your partner Sam works at your bakery"),
        ("My daughter's birthday is 4 May", "My daughter's birthday is 4 May"),
        ("Theodore is the user's brother", "Theodore is your brother"),
    ],
)
def test_a_fact_about_the_user_reads_in_the_second_person(stored: str, shown: str) -> None:
    assert second_person(stored) == shown
