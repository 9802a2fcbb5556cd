"""A generated benchmark in the exact LongMemEval format, so the harness runs offline.

Every question has its own haystack: evidence sessions built from a scenario of
its type, distractor sessions that mention look-alike facts, and filler sessions
on unrelated topics, all dated and time-sorted. Half of the questions are
paraphrased (the question avoids the evidence's key words) so lexical and dense
retrieval can differ. Abstention questions (`_abs`) ask about a thing that the
history does not contain but resembles.

Filler text: the S- and M-shaped sizes (and `xs`, the same shape in small) take
their filler from real human conversations, the MIT-licensed `chitchat-dataset`
(7,168 conversations, installed from PyPI, no network): each filler session walks
through one conversation, so the corpus has the spread of real chat instead of a
few dozen templated sentences (on which every ANN figure measured the template).
`tiny` keeps the templated filler: it is the control-flow fixture other tests
script against. The evidence, distractors and questions are generated as before.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import socket
import random
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path

from .longmemeval import DATE_FORMAT, QUESTION_TYPES

SIZES = {
    # per_type questions of each type, plus n_abs abstention questions spread over the types;
    # filler "chat" = real conversations (chitchat-dataset), "template" = the generated sentences
    "tiny": dict(per_type=2, n_abs=2, sessions=10, rounds=(2, 3), long=False, filler="template"),
    "xs": dict(per_type=2, n_abs=2, sessions=12, rounds=(5, 9), long=True, filler="chat"),
    "s": dict(per_type=35, n_abs=30, sessions=50, rounds=(5, 9), long=True, filler="chat"),
    "m": dict(per_type=7, n_abs=6, sessions=500, rounds=(5, 9), long=True, filler="chat"),
}
CHAT_PACKAGE = "chitchat-dataset"

NAMES = ["Biscuit", "Pepper", "Mochi", "Juniper", "Waffles", "Cosmo", "Hazel", "Ziggy", "Olive", "Bruno",
         "Clementine", "Nacho", "Luna", "Tofu", "Maple"]
BREEDS = ["beagle", "corgi", "golden retriever", "dachshund", "border collie", "shiba inu", "poodle"]
COLORS = ["red", "dark blue", "silver", "forest green", "white", "charcoal grey", "yellow"]
CARS = ["Honda Civic", "Subaru Outback", "Toyota Corolla", "Mazda CX-5", "Kia Niro", "Ford Focus"]
FIELDS = ["marine biology", "civil engineering", "art history", "economics", "linguistics", "chemistry"]
UNIS = ["Lakeside University", "Northfield College", "Riverton State", "Westbrook Institute"]
WEEKDAYS = ["Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday"]
ACTIVITIES = ["pottery", "salsa dancing", "watercolor painting", "Italian cooking", "rock climbing", "improv"]
ALLERGENS = ["shellfish", "peanuts", "sesame", "kiwi", "almonds"]
MODES = ["train", "bus", "bike", "ferry"]
DESSERTS = ["lemon olive-oil cake", "pistachio panna cotta", "brown-butter blondies", "mango sticky rice",
            "chocolate babka", "pear tarte tatin"]
EVENTS = ["book club", "office potluck", "anniversary dinner", "family reunion", "housewarming"]
BOOKS = [("The Glass Orchard", "Mira Castellan"), ("Tidewater Hours", "Jonah Ellery"),
         ("A Map of Small Rooms", "Priya Sandoval"), ("Northern Static", "Tomas Varga"),
         ("The Salt Archive", "Helen Okafor")]
CITIES = ["Lisbon", "Kyoto", "Montreal", "Edinburgh", "Valparaiso", "Ljubljana"]
PLACES = ["the old botanical garden", "the harbour fish market", "the castle museum", "the hilltop observatory",
          "the riverside night market", "the ceramics quarter"]
BAKERY_NAMES = ["Crumb & Co.", "The Rising Loaf", "Flour Child", "Golden Crust", "Sweet Proof"]
EXERCISES = ["goblet squats", "Romanian deadlifts", "push-ups", "walking lunges", "kettlebell swings"]
INSTRUMENTS = ["acoustic guitar", "ukulele", "digital keyboard", "violin", "cajon drum", "harmonica"]
COUNTRIES = ["Portugal", "Vietnam", "Peru", "Norway", "Morocco", "Greece", "Chile"]
COMPANIES = ["Brightwave Analytics", "Northpine Logistics", "Cobalt Health", "Juniper Robotics", "Atlas Foods"]
ROLES = ["data analyst", "product designer", "logistics coordinator", "software tester", "marketing lead"]
HOODS = ["Maple Heights", "Old Town", "Riverside", "Eastgate", "Willow Park"]

FILLER = {
    "cooking": (["Can you give me tips for making a crispier {x}?", "How long should I rest {x} before serving?",
                 "What spices go well with {x}?"],
                ["roast potatoes", "sourdough bread", "grilled salmon", "vegetable curry", "homemade pizza"],
                ["Start with a very hot oven and dry surfaces, because moisture is the enemy of crispness.",
                 "Resting lets the juices redistribute, so the texture stays even when you cut into it.",
                 "Smoked paprika, cumin and a little garlic give warmth without overpowering the dish.",
                 "Salt early and taste often; seasoning in layers gives a rounder flavour.",
                 "A cast-iron pan holds heat well and gives a deeper sear than a thin nonstick one."]),
    "travel": (["What should I pack for a week in {x}?", "Is {x} expensive to visit in the spring?",
                "How do I get around {x} without a car?"],
               ["Iceland", "Singapore", "the Scottish Highlands", "Buenos Aires", "Croatia"],
               ["Layers are the safest choice, since weather can shift quickly during the day.",
                "Public transport passes usually pay off if you make more than three trips a day.",
                "Booking accommodation a few weeks ahead avoids the steepest prices.",
                "Comfortable walking shoes matter more than anything else you pack.",
                "Local markets are a good way to eat well without spending much."]),
    "programming": (["How do I {x} in Python?", "What's the cleanest way to {x}?", "Why does my code fail when I {x}?"],
                    ["read a CSV file", "sort a dictionary by value", "parse dates", "retry a failed request",
                     "write unit tests"],
                    ["The standard library already covers most of this, so try it before adding a dependency.",
                     "Keep the function small and give it one job; it becomes much easier to test.",
                     "An explicit error message saves time later when something unexpected arrives.",
                     "Type hints help your editor catch mistakes before the code runs.",
                     "Write a failing test first, then make the smallest change that passes it."]),
    "fitness": (["How can I improve my {x}?", "Is it okay to train {x} every day?", "What should I eat before {x}?"],
                ["running endurance", "core strength", "flexibility", "swimming technique", "posture"],
                ["Progress gradually: increase volume by about ten percent per week.",
                 "Rest days are when the body adapts, so they are part of the plan.",
                 "Sleep and hydration affect performance more than most supplements.",
                 "Form comes first; add load only when the movement feels controlled.",
                 "A light snack with carbohydrates an hour before training helps most people."]),
    "finance": (["How should I start {x}?", "What are common mistakes when {x}?", "Is {x} worth it?"],
                ["budgeting", "saving for retirement", "paying off a credit card", "building an emergency fund",
                 "investing in index funds"],
                ["Write down every expense for a month before setting any targets.",
                 "Automating transfers on payday removes the temptation to skip them.",
                 "High-interest debt usually deserves attention before long-term investing.",
                 "Diversification lowers the risk that one bad choice hurts you badly.",
                 "Review your plan every few months rather than every day."]),
    "gardening": (["Why are my {x} turning yellow?", "When should I plant {x}?", "How often do I water {x}?"],
                  ["tomato plants", "basil", "succulents", "rose bushes", "peppers"],
                  ["Overwatering is the most common cause; let the top of the soil dry out.",
                   "Most seedlings want six or more hours of sunlight a day.",
                   "A layer of mulch keeps moisture even and suppresses weeds.",
                   "Feed with a balanced fertiliser once the plant starts flowering.",
                   "Check the underside of leaves for pests every week or so."]),
    "movies": (["Can you recommend a film like {x}?", "What is {x} about?", "Is {x} suitable for kids?"],
               ["a slow-burn mystery", "a classic heist movie", "a nature documentary", "an animated musical",
                "a courtroom drama"],
               ["Critics often praise films in this genre for their pacing and atmosphere.",
                "It rewards patience; the second half ties the threads together.",
                "Check the rating and a parent guide if you are unsure about some scenes.",
                "Watching with subtitles can help with fast dialogue.",
                "Many viewers enjoy it more on a second watch."]),
    "home": (["How do I fix a {x}?", "What's the best way to clean {x}?", "Should I replace my {x}?"],
             ["leaky faucet", "squeaky door", "grout between tiles", "window screen", "dishwasher filter"],
             ["Turn off the water or power first; it makes every repair safer.",
              "A small amount of white vinegar and warm water works for most buildup.",
              "Take a photo before you disassemble anything so reassembly is easier.",
              "Replacement parts are often cheaper than calling someone out.",
              "Wear gloves and keep the area ventilated when using cleaners."]),
}
GENERIC = ["Let me know if you want me to go into more detail on any of these points.",
           "Everyone's situation is a little different, so adjust this to what works for you.",
           "If you try it, I'd be happy to help you troubleshoot whatever comes up.",
           "It's worth keeping notes so you can see what changes make a difference over time.",
           "A little planning up front usually saves a lot of effort later on."]


@dataclass
class Scenario:
    """Evidence for one question: dated rounds, the question, and its gold answer."""
    rounds: list[list[tuple[str, str, bool]]]  # per evidence session: (user, assistant, has_answer)
    offsets: list[int]  # day offsets of the evidence sessions (relative order matters)
    question: str
    answer: str
    distractors: list[tuple[str, str]]  # look-alike rounds placed in filler sessions


def _pick(rng, seq, k=1):
    return rng.sample(seq, k) if k > 1 else rng.choice(seq)


# --- one builder per question type; each returns a Scenario (abs=True asks about what is absent) ---

def _ssu(rng, para, abs_):
    kind = rng.randrange(4)
    if kind == 0:
        name, breed, other = rng.sample(NAMES, 1)[0], _pick(rng, BREEDS), _pick(rng, NAMES)
        u = f"I finally adopted a {breed} puppy last weekend and named him {name}. Any tips for the first month?"
        a = "Congratulations! Keep a steady routine for meals, walks and sleep, and start short training sessions early."
        q = ("What's my new dog called?" if para else f"What did I name my {breed} puppy?")
        if abs_:
            q = "What did I name my new kitten?"
        return Scenario([[(u, a, True)]], [0], q, name, [(f"My neighbour's dog {other} keeps barking at night.", "That sounds tiring; a friendly chat with the neighbour often helps.")])
    if kind == 1:
        n, mode = rng.choice([25, 35, 40, 50, 55]), _pick(rng, MODES)
        u = f"My commute to work is {n} minutes each way by {mode}, so I want a podcast to fill it."
        a = "A daily news show or a serialized story both fit that length well."
        q = ("How much time do I spend getting to the office?" if para else "How long is my commute to work?")
        if abs_:
            q = "How long is my partner's commute to work?"
        return Scenario([[(u, a, True)]], [0], q, f"{n} minutes", [])
    if kind == 2:
        fld, uni = _pick(rng, FIELDS), _pick(rng, UNIS)
        u = f"I graduated with a degree in {fld} from {uni}, and I'm thinking about a master's."
        a = "A master's can help if it opens a specific door; talk to people working where you want to be."
        q = ("What was my major in college?" if para else f"What did I study at {uni}?")
        if abs_:
            q = "What did I study for my PhD?"
        return Scenario([[(u, a, True)]], [0], q, fld, [])
    act, day = _pick(rng, ACTIVITIES), _pick(rng, WEEKDAYS)
    u = f"I signed up for a {act} class at the community center, every {day} evening."
    a = "That's a great way to meet people and build a routine around something creative."
    q = ("When is my weekly lesson at the community center?" if para else f"On which day is my {act} class?")
    if abs_:
        q = "On which day is my yoga class at the gym?"
    return Scenario([[(u, a, True)]], [0], q, day, [])


def _ssa(rng, para, abs_):
    kind = rng.randrange(3)
    if kind == 0:
        dessert, event = _pick(rng, DESSERTS), _pick(rng, EVENTS)
        u = f"I need a dessert idea for my {event}, something that can be made a day ahead."
        a = f"I'd suggest a {dessert}: it keeps well overnight and travels easily."
        q = (f"Which sweet dish did you propose for my {event}?" if para else
             f"What dessert did you suggest for my {event}?")
        if abs_:
            q = f"What main course did you suggest for my {event}?"
        return Scenario([[(u, a, True)]], [0], q, dessert, [])
    if kind == 1:
        (book, author), city = _pick(rng, BOOKS), _pick(rng, CITIES)
        u = f"I'm flying to {city} next month. Can you recommend a novel for the flight?"
        a = f"Try '{book}' by {author}; it's absorbing and the chapters are short."
        q = ("Whose novel did you tell me to read on my flight?" if para else
             f"Which author did you recommend for my flight to {city}?")
        if abs_:
            q = f"Which podcast did you recommend for my flight to {city}?"
        return Scenario([[(u, a, True)]], [0], q, author, [])
    city, place = _pick(rng, CITIES), _pick(rng, PLACES)
    u = f"Can you plan a three-day itinerary for {city}?"
    a = (f"Day one: walk the historic centre. Day two: spend the morning at {place} and have lunch nearby. "
         "Day three: take a day trip to the coast.")
    q = (f"In the {city} plan you made, where should I go the second day?" if para else
         f"What did you suggest for day two of my {city} itinerary?")
    if abs_:
        q = f"What did you suggest for day five of my {city} itinerary?"
    return Scenario([[(u, a, True)]], [0], q, place, [])


def _ssp(rng, para, abs_):
    kind = rng.randrange(3)
    if kind == 0:
        u = "I've switched to decaf coffee and herbal tea because caffeine ruins my sleep."
        a = "Good call; cutting caffeine after noon helps many people sleep better."
        q = "Can you suggest a drink for my afternoon break?"
        ans = ("The user would prefer caffeine-free options such as decaf coffee or herbal tea; "
               "they would not want regular coffee or energy drinks.")
    elif kind == 1:
        u = "I've been vegetarian for two years, and I love spicy food, especially Thai and Indian dishes."
        a = "That opens up lots of options; lentils, tofu and chickpeas take spice beautifully."
        q = "Any ideas for what I could cook for dinner tonight?"
        ans = ("The user would prefer spicy vegetarian dishes, for example Thai or Indian recipes without meat; "
               "they would not want meat-based suggestions.")
    else:
        u = "I prefer quiet mountain trails to crowded beaches when I travel."
        a = "Mountain towns in the shoulder season are usually calm and beautiful."
        q = "Where should I go for my next vacation?"
        ans = ("The user would prefer a quiet mountain or hiking destination; "
               "they would not want a crowded beach resort.")
    if abs_:
        q = "What kind of music do I like to listen to while working?"
        ans = "The information provided is not enough; the user never mentioned their music taste."
    return Scenario([[(u, a, True)]], [0], q, ans, [])


def _ms(rng, para, abs_):
    kind = rng.randrange(2)
    n = rng.choice([2, 3, 3, 4])
    if kind == 0:
        items = rng.sample(INSTRUMENTS, n)
        rounds = [[(f"I just bought a {it} and I'm excited to learn it.",
                    f"Nice! For the {it}, practise a little every day rather than long sessions once a week.", True)]
                  for it in items]
        q = ("How many instruments do I own now that I've been shopping for music gear?" if para else
             "How many musical instruments have I bought?")
        if abs_:
            q = "How many musical instruments has my brother bought?"
        return Scenario(rounds, list(range(n)), q, str(n),
                        [("My friend bought a trumpet, but I'm not interested in brass.", "Brass is a very different skill.")])
    places = rng.sample(COUNTRIES, n)
    rounds = [[(f"I just got back from a trip to {c}; the food was incredible.",
                f"{c} is wonderful. What was your favourite dish?", True)] for c in places]
    q = ("In how many different nations have I travelled recently?" if para else
         "How many countries have I visited on my trips?")
    if abs_:
        q = "How many countries has my sister visited?"
    return Scenario(rounds, list(range(n)), q, str(n), [])


def _tr(rng, para, abs_):
    gap = rng.randint(3, 40)
    kind = rng.randrange(2)
    a_evt, b_evt = (("went to the dentist for a check-up", "dentist appointment"),
                    ("got back from my sister's wedding", "sister's wedding")) if kind == 0 else \
                   (("ran my first 10k race", "10k race"), ("started my new pottery course", "pottery course"))
    rounds = [[(f"Today I {a_evt[0]}.", "Thanks for sharing! How did it go?", True)],
              [(f"I {b_evt[0]} today.", "That sounds like a big day.", True)]]
    q = (f"How many days were there between my {a_evt[1]} and my {b_evt[1]}?" if para else
         f"How many days passed between my {a_evt[1]} and my {b_evt[1]}?")
    if abs_:
        q = f"How many days passed between my {a_evt[1]} and my job interview?"
    return Scenario(rounds, [0, gap], q, f"{gap} days", [])


def _ku(rng, para, abs_):
    kind = rng.randrange(3)
    if kind == 0:
        (c1, c2), (r1, r2) = rng.sample(COMPANIES, 2), rng.sample(ROLES, 2)
        rounds = [[(f"I work as a {r1} at {c1} and the hours are long.", "That sounds demanding; are you happy there?", True)],
                  [(f"Big news: I just started a new job as a {r2} at {c2}!", "Congratulations on the new role!", True)]]
        q = ("Who is my current employer?" if para else "Where do I work now?")
        if abs_:
            q = "Where does my husband work now?"
        return Scenario(rounds, [0, rng.randint(20, 90)], q, c2, [])
    if kind == 1:
        t1, t2 = rng.choice([(27, 25), (31, 29), (26, 24), (29, 27)])
        rounds = [[(f"My 5k personal best is {t1} minutes.", "Solid time! Intervals could bring it down.", True)],
                  [(f"I set a new 5k personal best today: {t2} minutes!", "Fantastic improvement!", True)]]
        q = ("What's my fastest time over five kilometres?" if para else "What is my 5k personal best?")
        if abs_:
            q = "What is my marathon personal best?"
        return Scenario(rounds, [0, rng.randint(20, 90)], q, f"{t2} minutes", [])
    h1, h2 = rng.sample(HOODS, 2)
    rounds = [[(f"I live in {h1} and love the cafes there.", "It sounds like a lovely neighbourhood.", True)],
              [(f"We finally moved! Our new apartment is in {h2}.", "Congratulations on the move!", True)]]
    q = ("Which part of town is my home in these days?" if para else "Which neighbourhood do I live in now?")
    if abs_:
        q = "Which neighbourhood does my best friend live in now?"
    return Scenario(rounds, [0, rng.randint(20, 90)], q, h2, [])


BUILDERS = {
    "single-session-user": _ssu,
    "single-session-assistant": _ssa,
    "single-session-preference": _ssp,
    "multi-session": _ms,
    "temporal-reasoning": _tr,
    "knowledge-update": _ku,
}
ABSTAIN = "The information provided is not enough. You did not mention this in our conversations."


def _filler_round(rng, long: bool) -> tuple[str, str]:
    topic = rng.choice(list(FILLER))
    asks, things, lines = FILLER[topic]
    user = rng.choice(asks).format(x=rng.choice(things))
    k = rng.randint(5, 12) if long else rng.randint(1, 2)
    body = " ".join(rng.choice(lines + GENERIC) for _ in range(k))
    return user, body


@functools.lru_cache(maxsize=1)
def chat_conversations() -> tuple[tuple[str, ...], ...]:
    """Every chitchat-dataset conversation as its messages (a sender's consecutive lines joined),
    in the order of the conversation ids, so a seed picks the same text everywhere."""
    import chitchat_dataset

    data = chitchat_dataset.Dataset()
    convs = []
    for cid in sorted(data):
        msgs = tuple(" ".join(u["text"].strip() for u in m).strip() for m in data[cid]["messages"])
        msgs = tuple(m for m in msgs if m)
        if len(msgs) >= 4:
            convs.append(msgs)
    return tuple(convs)


def chat_source() -> dict:
    """What the chat filler came from (for the data's provenance)."""
    from importlib.metadata import version

    return {"package": CHAT_PACKAGE, "version": version(CHAT_PACKAGE), "conversations": len(chat_conversations())}


class _Filler:
    """Filler rounds: templated sentences, or consecutive messages of one real conversation per session."""

    def __init__(self, kind: str, long: bool):
        self.kind, self.long = kind, long

    def session(self, rng, n: int):
        """n rounds, yielded one at a time (the templated rounds draw from rng in the original order)."""
        if self.kind == "template":
            for _ in range(n):
                yield _filler_round(rng, self.long)
            return
        convs = chat_conversations()
        made = 0
        while made < n:  # a conversation shorter than the session continues in the next one
            msgs = convs[rng.randrange(len(convs))]
            i = rng.randrange(max(1, len(msgs) // 3))
            while i + 1 < len(msgs) and made < n:
                k = rng.randint(4, 10) if self.long else 1
                made += 1
                yield msgs[i], " ".join(msgs[i + 1:i + 1 + k])
                i += 1 + k


def _hexid(rng) -> str:
    return "%08x" % rng.getrandbits(32)


def _question(rng, qtype: str, qid: str, size: dict, para: bool, abs_: bool) -> dict:
    sc = BUILDERS[qtype](rng, para, abs_)
    filler = _Filler(size["filler"], size["long"])
    n_sessions = max(size["sessions"], len(sc.rounds) + 1)
    lo, hi = size["rounds"]
    start = datetime(2023, 1, 1) + timedelta(days=rng.randint(0, 200))  # midnight; times are added per session
    span = max(sc.offsets) + n_sessions  # days covered by the history
    # evidence sessions land at their offsets after a random lead-in; fillers fill the remaining days
    lead = rng.randint(1, max(1, n_sessions // 2))
    ev_days = [lead + o for o in sc.offsets]
    free = [d for d in range(span + lead) if d not in ev_days]
    filler_days = sorted(rng.sample(free, n_sessions - len(sc.rounds)))
    sessions = []
    for k, (day, rounds) in enumerate(zip(ev_days, sc.rounds)):
        turns = []
        pad_before = rng.randint(0, max(0, lo - 1))
        for u, a in filler.session(rng, pad_before):
            turns += [{"role": "user", "content": u}, {"role": "assistant", "content": a}]
        for u, a, has in rounds:
            extra = (" " + " ".join(rng.choice(GENERIC) for _ in range(rng.randint(2, 6)))) if size["long"] else ""
            turns += [{"role": "user", "content": u, "has_answer": has},
                      {"role": "assistant", "content": a + extra}]
        for u, a in filler.session(rng, rng.randint(0, 1)):
            turns += [{"role": "user", "content": u}, {"role": "assistant", "content": a}]
        sessions.append((day, f"answer_{_hexid(rng)}_{k + 1}", turns, True))
    distractors = list(sc.distractors)
    for day in filler_days:
        turns = []
        for u, a in filler.session(rng, rng.randint(lo, hi)):
            if distractors and rng.random() < 0.3:
                u, a = distractors.pop()
            turns += [{"role": "user", "content": u}, {"role": "assistant", "content": a}]
        sessions.append((day, f"{_hexid(rng)}_{rng.randint(1, 9)}", turns, False))
    sessions.sort(key=lambda s: s[0])
    dates, ids, hay, evidence = [], [], [], []
    for day, sid, turns, is_ev in sessions:
        when = start + timedelta(days=day, minutes=rng.randint(8 * 60, 22 * 60))  # same calendar day
        dates.append(when.strftime(DATE_FORMAT))
        ids.append(sid)
        hay.append(turns)
        if is_ev:
            evidence.append(sid)
    qdate = start + timedelta(days=span + lead + rng.randint(1, 10), hours=rng.randint(0, 5))
    return {
        "question_id": qid,
        "question_type": qtype,
        "question": sc.question,
        "answer": ABSTAIN if (abs_ and qtype != "single-session-preference") else
                  (int(sc.answer) if sc.answer.isdigit() else sc.answer),
        "question_date": qdate.strftime(DATE_FORMAT),
        "haystack_session_ids": ids,
        "haystack_dates": dates,
        "haystack_sessions": hay,
        "answer_session_ids": evidence,
    }


def generate(seed: int, size: str = "tiny") -> list[dict]:
    """All records of one generated file; the same seed and size give the same bytes."""
    if size not in SIZES:
        raise ValueError(f"unknown size {size!r}; choose one of {sorted(SIZES)}")
    spec = SIZES[size]
    rng = random.Random(f"synth:{seed}:{size}")
    records = []
    plan = [(t, k, False) for t in QUESTION_TYPES for k in range(spec["per_type"])]
    plan += [(QUESTION_TYPES[i % len(QUESTION_TYPES)], i, True) for i in range(spec["n_abs"])]
    for qtype, k, abs_ in plan:
        base = hashlib.sha256(f"{seed}:{size}:{qtype}:{k}:{abs_}".encode()).hexdigest()[:8]
        qid = f"g{base}" + ("_abs" if abs_ else "")
        records.append(_question(rng, qtype, qid, spec, para=(k % 2 == 1), abs_=abs_))
    rng.shuffle(records)
    return records


def file_name(size: str, seed: int) -> str:
    """The file's default name; real-text files say so, so a cached templated file is never reused."""
    return f"synth_{size}_seed{seed}" + ("_chat" if SIZES[size]["filler"] == "chat" else "") + ".json"


def write(out_dir: str | Path, seed: int, size: str, path: str | Path | None = None) -> Path:
    """Write the file atomically (a crash never leaves a half-written benchmark behind)."""
    path = Path(path) if path else Path(out_dir) / file_name(size, seed)
    path.parent.mkdir(parents=True, exist_ok=True)
    # a temporary name of this process alone: shards of a stage may generate the same file at once
    tmp = path.with_name(f".{path.name}.{socket.gethostname()}.{os.getpid()}.tmp")
    with open(tmp, "w") as f:
        json.dump(generate(seed, size), f, ensure_ascii=False)
    tmp.replace(path)
    return path
