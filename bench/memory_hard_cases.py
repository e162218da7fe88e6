"""Hard memory cases for ``bench/memory_quality.py --hard``: questions that share few words with their evidence.

The memory-eval cases are saturated (the builders read 0.93-0.95 at 1,500 tokens): their questions name what they
ask about. These are built to tell good from better, in four kinds:

- ``paraphrase``: the evidence says it in other words ("what do I do for a living?" / "I work as a nurse").
- ``distractor``: the question's words recur in many lines that do not answer it; one line does.
- ``multi-hop``: the answer takes two lines, one of which shares no word with the question.
- ``temporal``: a "when" question, or one whose answer is the latest of several similar lines.

Each case is a member's history of several calls over months: chit-chat lines made from templates with a seeded
random generator (names, places and numbers in them, so the specifics prior alone does not find the evidence), the
distractors spread through it, and the evidence placed in an early call, so recency does not find it either.
Evidence recall is the share of the evidence lines present in the block. The texts are this project's own.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

Kind = str


@dataclass(frozen=True)
class HardCase:
    case_id: str
    kind: Kind
    question: str
    evidence: tuple[str, ...]
    sessions: list[tuple[datetime, list[dict[str, str]]]]


@dataclass(frozen=True)
class _Spec:
    kind: Kind
    question: str
    evidence: tuple[str, ...]
    distractors: tuple[str, ...] = ()
    older: tuple[str, ...] = ()
    """Lines said before the evidence that look like it but are out of date (temporal: the latest one answers)."""


SPECS: dict[str, _Spec] = {
    "job": _Spec(
        "paraphrase",
        "What did I say about my job?",
        ("I work as a nurse at St Mary's hospital, mostly night shifts.",),
        ("My cousin says the job market is tough.", "Did you say the shop opens at nine?"),
    ),
    "living": _Spec(
        "paraphrase",
        "What do I do for a living?",
        ("I teach chemistry to teenagers at Northfield Academy.",),
        ("We watched a documentary about living in the Arctic.", "What do you think about the new bridge?"),
    ),
    "pet": _Spec(
        "paraphrase",
        "Which pet do I have?",
        ("My cat Miso sleeps on the radiator all day long.",),
        ("The pet shop on Main Street closed down.", "I have to buy a new kettle."),
    ),
    "grew_up": _Spec(
        "paraphrase",
        "Where did I grow up?",
        ("I spent my childhood in a small fishing village near Cork.",),
        ("My nephew grew two inches this year.", "Where the road bends there is a bakery."),
    ),
    "car": _Spec(
        "paraphrase",
        "What car do I drive?",
        ("I get around in an old blue Volvo estate.",),
        ("The car park at the station was full again.", "I drive my sister to the gym on Fridays."),
    ),
    "allergy": _Spec(
        "paraphrase",
        "Am I allergic to any food?",
        ("Peanuts make my throat swell up, so I avoid them completely.",),
        ("My friend is allergic to cats.", "The food at the wedding was cold."),
    ),
    "instrument": _Spec(
        "paraphrase",
        "What instrument do I play?",
        ("I have been practising the cello every evening for ten years.",),
        ("The kids play football in the park on Sundays.", "We listened to a podcast about an old piano maker."),
    ),
    "commute": _Spec(
        "paraphrase",
        "How do I get to work?",
        ("I cycle to the office along the canal every morning.",),
        ("Work has been really busy this month.", "How do you get red wine out of a carpet?"),
    ),
    "dentist": _Spec(
        "distractor",
        "What is my dentist's name?",
        ("My dentist is Dr Alvarez on King Street.",),
        (
            "I need to call the dentist about the bill.",
            "The dentist's waiting room was freezing.",
            "They spelled my name wrong on the form again.",
            "My son is scared of the dentist.",
            "What a strange name for a restaurant.",
        ),
    ),
    "door_code": _Spec(
        "distractor",
        "What's the code for my building's door?",
        ("The entry code for the front door of my building is 4471.",),
        (
            "The door of the shed is broken again.",
            "My building has a new caretaker called Ivo.",
            "I forgot the code for the bike lock.",
            "The office building was evacuated for a drill.",
        ),
    ),
    "school": _Spec(
        "distractor",
        "Which school does my son go to?",
        ("Leo started at Hillcrest Primary in September.",),
        (
            "My son loves dinosaurs more than anything.",
            "The school bus was late three times this week.",
            "My son wants a bike for his birthday.",
            "The school fete raised two hundred pounds.",
        ),
    ),
    "bank": _Spec(
        "distractor",
        "Which bank is my savings account with?",
        ("I keep my savings with Coastline Building Society.",),
        (
            "The bank holiday traffic was awful.",
            "My account on the game got hacked.",
            "We sat on the river bank and had a picnic.",
            "Savings on the energy bill were tiny.",
        ),
    ),
    "sister_dog": _Spec(
        "multi-hop",
        "What is my sister's dog called?",
        ("My sister Ana lives in Porto with her husband.", "Ana's beagle is called Pimenta."),
        ("My neighbour's dog barks all night.", "My sister called me about the holiday."),
    ),
    "friend_work": _Spec(
        "multi-hop",
        "Where does my best friend work?",
        ("My best friend is Tomasz, we met at university.", "Tomasz works at the central city library now."),
        ("My friend from the choir moved away.", "Where does the time go?"),
    ),
    "brother_wife": _Spec(
        "multi-hop",
        "What does my brother's wife do?",
        ("My brother Sam married Julia last spring.", "Julia is a civil engineer who designs bridges."),
        ("My brother is terrible at cooking.", "What does everyone want for dinner?"),
    ),
    "mum_flat": _Spec(
        "multi-hop",
        "Which city is my mother's new flat in?",
        ("Mum finally moved into a new flat last month.", "Her new place is in Leeds, right by the park."),
        ("My mother keeps sending me recipes.", "The city council fixed the potholes."),
    ),
    "started_job": _Spec(
        "temporal",
        "When did I start at the bakery?",
        ("I started at the Rye Street bakery on Monday the 3rd of March.",),
        ("The bakery ran out of sourdough again.", "When did the clocks go forward?"),
    ),
    "birthday": _Spec(
        "temporal",
        "When is my mum's birthday?",
        ("Mum's birthday is on the 2nd of October.",),
        ("My birthday cake collapsed last year.", "When is the recycling collected?"),
    ),
    "doctor": _Spec(
        "temporal",
        "When did I last see the doctor?",
        ("I saw Dr Patel about my knee on Tuesday, she wants an X-ray.",),
        ("The doctor's surgery changed its phone number.",),
        ("I saw Dr Patel about my cough back in January.",),
    ),
    "holiday": _Spec(
        "temporal",
        "Where did we decide to go on holiday?",
        ("We changed our minds, the holiday is in Crete now, not Sicily.",),
        ("Holiday prices go up every summer.", "Did you decide what to cook?"),
        ("We are thinking of Sicily for the summer holiday.",),
    ),
}

NAMES = ["Marta", "Kofi", "Ilse", "Ravi", "Noor", "Pavel", "Aiko", "Bea", "Cosmin", "Dara", "Femi", "Gus"]
PLACES = ["the market", "Brighton", "the garden centre", "Dundee", "the cinema", "the leisure centre", "Bath"]
THINGS = ["the quiz night", "the new cafe", "a crossword", "the football", "the weather", "a film", "the allotment"]
TEMPLATES = [
    "{name} and {name2} went to {place} on Saturday the {n}th.",
    "It rained all afternoon in {place}, so {name} and I watched {thing}.",
    "{name} told me about {thing} at {place}, it cost {n} pounds.",
    "I spent {n} minutes on {thing} with {name} this morning.",
    "We might try {place} again on the {n}th with {name2}.",
    "The number {n} bus to {place} was late again, {name} waited ages.",
    "{name2} finally finished {thing}, it took {n} days.",
    "{name} is coming over for tea on Thursday at {n} past four.",
    "I bought {n} tomatoes at {place} for {name2}.",
    "Honestly {thing} with {name} was better than I expected.",
    "{name2} said {thing} at {place} starts at {n} o'clock.",
    "{name} recommended {place} for a day out in May.",
]
REPLIES = [
    "That sounds lovely.",
    "Oh, tell me more about that.",
    "I hope it went well.",
    "That must have been nice.",
    "Good to hear from you.",
    "How did that feel?",
    "Noted, thanks for sharing.",
]
SESSIONS = 10
LINES_PER_SESSION = 80
START = datetime(2025, 1, 6, 18, 0, tzinfo=UTC)


def _chat(rng: random.Random) -> str:
    template = rng.choice(TEMPLATES)
    return template.format(
        name=rng.choice(NAMES),
        name2=rng.choice(NAMES),
        place=rng.choice(PLACES),
        thing=rng.choice(THINGS),
        n=rng.randint(2, 30),
    )


def _build(case_id: str, spec: _Spec, seed: int) -> HardCase:
    rng = random.Random(seed)
    said: list[list[str]] = [[_chat(rng) for _ in range(LINES_PER_SESSION // 2)] for _ in range(SESSIONS)]
    for line in spec.distractors:  # anywhere, mostly after the evidence
        session = said[rng.randrange(SESSIONS)]
        session.insert(rng.randrange(len(session) + 1), line)
    first = said[1]
    at = rng.randrange(2, len(first) - 2)
    for offset, line in enumerate(spec.evidence):
        first.insert(at + offset * 3, line)  # a multi-hop's two lines a few lines apart
    for line in spec.older:  # said in the first call, before the evidence
        said[0].insert(rng.randrange(len(said[0]) + 1), line)
    sessions = []
    for number, lines in enumerate(said):
        messages: list[dict[str, str]] = []
        for line in lines:
            messages.append({"role": "user", "content": line})
            messages.append({"role": "assistant", "content": rng.choice(REPLIES)})
        sessions.append((START + timedelta(days=6 * number + rng.randint(0, 3)), messages))
    return HardCase(case_id, spec.kind, spec.question, spec.evidence, sessions)


def hard_cases(seed: int = 28) -> list[HardCase]:
    return [_build(case_id, spec, seed + n) for n, (case_id, spec) in enumerate(SPECS.items())]
