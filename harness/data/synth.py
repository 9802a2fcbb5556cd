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

Wordings: each scenario lists several wordings of its question, built from the values
the scenario drew (the breed, the city, the old employer...), and a separate rng per
question picks one that no earlier question of the file asks. Real benchmarks do not
repeat a question (LongMemEval's 500 are all different); one fixed template per
scenario gave 65 distinct texts among the 240 of the S file. The main rng draws exactly
what it drew before, so the histories (and any embedding cache of their chunks) are
unchanged; only the `question` field differs from the q1 files.
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
    """Evidence for one question: dated rounds, the wordings of its question, and its gold answer."""
    rounds: list[list[tuple[str, str, bool]]]  # per evidence session: (user, assistant, has_answer)
    offsets: list[int]  # day offsets of the evidence sessions (relative order matters)
    questions: list[str]  # every wording that fits this scenario; one is asked
    answer: str
    distractors: list[tuple[str, str]]  # look-alike rounds placed in filler sessions


def _pick(rng, seq, k=1):
    return rng.sample(seq, k) if k > 1 else rng.choice(seq)


# --- one builder per question type; each returns a Scenario (abs=True asks about what is absent) ---
# A builder draws from `rng` only what the history needs (the draws are the same as before the
# wordings existed, so the histories stay byte-identical); every wording of its question is
# listed, built from the values already drawn, and `_question` picks one with a separate rng.

PEOPLE = ["partner", "sister", "brother", "roommate", "best friend", "cousin"]
# other words for a value, for paraphrased questions (which avoid the evidence's key words)
ACTIVITY_ALIAS = {"pottery": "ceramics", "salsa dancing": "Latin dance", "watercolor painting": "art",
                  "Italian cooking": "pasta-making", "rock climbing": "bouldering", "improv": "comedy theatre"}
EVENT_ALIAS = {"book club": "reading group", "office potluck": "shared lunch with my coworkers",
               "anniversary dinner": "celebration with my partner", "family reunion": "get-together with my relatives",
               "housewarming": "party at our new place"}
INSTRUMENT_ALIAS = {"acoustic guitar": "six-string", "ukulele": "four-string from Hawaii",
                    "digital keyboard": "electric piano", "violin": "fiddle", "cajon drum": "percussion box",
                    "harmonica": "mouth organ"}
REGION_OF = {"Portugal": "Iberia", "Vietnam": "Southeast Asia", "Peru": "the Andes", "Norway": "Scandinavia",
             "Morocco": "North Africa", "Greece": "the Aegean", "Chile": "Patagonia"}
ROLE_ALIAS = {"data analyst": "analytics", "product designer": "user-experience", "logistics coordinator": "supply-chain",
              "software tester": "quality-assurance", "marketing lead": "brand-promotion"}
COUNTRY_OF = {"Lisbon": "Portugal", "Kyoto": "Japan", "Montreal": "Canada", "Edinburgh": "Scotland",
              "Valparaiso": "Chile", "Ljubljana": "Slovenia"}


def _ask(para: bool, abs_: bool, plain: list[str], paraphrased: list[str], absent: list[str]) -> list[str]:
    """The wordings that fit the question's kind: absent things, paraphrases, or the evidence's own words."""
    return absent if abs_ else paraphrased if para else plain


def _ssu(rng, para, abs_):
    kind = rng.randrange(4)
    if kind == 0:
        name, breed, other = rng.sample(NAMES, 1)[0], _pick(rng, BREEDS), _pick(rng, NAMES)
        u = f"I finally adopted a {breed} puppy last weekend and named him {name}. Any tips for the first month?"
        a = "Congratulations! Keep a steady routine for meals, walks and sleep, and start short training sessions early."
        q = _ask(para, abs_,
                 [f"What did I name my {breed} puppy?", f"What name did I give the {breed} puppy I adopted?",
                  f"What's the name of the {breed} puppy I adopted?", f"I adopted a {breed} puppy; what did I name him?",
                  f"Remind me, what did I name my {breed}?", f"What is my {breed} puppy named?"],
                 ["What's my new dog called?", "What did I call the dog I brought home recently?",
                  "What's my new four-legged friend called?", "What do I call the young dog who lives with me?",
                  "What did I decide to call my new dog?"],
                 ["What did I name my new kitten?", "What's my new cat called?"]
                 + [f"What did I name my {b} puppy?" for b in BREEDS if b != breed])
        return Scenario([[(u, a, True)]], [0], q, name, [(f"My neighbour's dog {other} keeps barking at night.", "That sounds tiring; a friendly chat with the neighbour often helps.")])
    if kind == 1:
        n, mode = rng.choice([25, 35, 40, 50, 55]), _pick(rng, MODES)
        u = f"My commute to work is {n} minutes each way by {mode}, so I want a podcast to fill it."
        a = "A daily news show or a serialized story both fit that length well."
        q = _ask(para, abs_,
                 ["How long is my commute to work?", f"How long is my commute to work by {mode}?",
                  f"How many minutes does my {mode} commute to work take?",
                  f"How long does my commute take each way by {mode}?",
                  f"When I take the {mode} to work, how long is my commute?", "How many minutes is my commute each way?"],
                 ["How much time do I spend getting to the office?", "How long does it take me to get to the office?",
                  "How long is my daily journey to the office?", "How much of my morning goes into getting to the office?",
                  "What's the travel time between my home and my job?"],
                 [f"How long is my {p}'s commute to work?" for p in PEOPLE]
                 + [f"How many minutes does my {p} spend getting to work?" for p in PEOPLE])
        return Scenario([[(u, a, True)]], [0], q, f"{n} minutes", [])
    if kind == 2:
        fld, uni = _pick(rng, FIELDS), _pick(rng, UNIS)
        u = f"I graduated with a degree in {fld} from {uni}, and I'm thinking about a master's."
        a = "A master's can help if it opens a specific door; talk to people working where you want to be."
        q = _ask(para, abs_,
                 [f"What did I study at {uni}?", f"What did I get my degree in at {uni}?",
                  f"What subject did I graduate in from {uni}?", f"Which degree did I earn at {uni}?",
                  f"I graduated from {uni}; what was my degree in?"],
                 ["What was my major in college?", "What field did I major in at college?", "What was my college major?",
                  "What did I specialise in as a student?", "Which discipline did I pursue in my bachelor's studies?"],
                 ["What did I study for my PhD?", "What was my PhD thesis about?",
                  "What did I study in my master's program?"]
                 + [f"What did I study at {x}?" for x in UNIS if x != uni])
        return Scenario([[(u, a, True)]], [0], q, fld, [])
    act, day = _pick(rng, ACTIVITIES), _pick(rng, WEEKDAYS)
    u = f"I signed up for a {act} class at the community center, every {day} evening."
    a = "That's a great way to meet people and build a routine around something creative."
    alias = ACTIVITY_ALIAS[act]
    q = _ask(para, abs_,
             [f"On which day is my {act} class?", f"What day of the week is my {act} class?",
              f"Which evening do I have my {act} class at the community center?",
              f"When is my {act} class at the community center?", f"Which day is the {act} class I signed up for?"],
             ["When is my weekly lesson at the community center?", f"Which weekday is my weekly {alias} lesson?",
              f"On what day of the week do I have my {alias} lessons?",
              f"What night of the week do I go to {alias} lessons?", "Which weekday is my new hobby course on?"],
             ["On which day is my yoga class at the gym?", "On which day is my spin class at the gym?",
              "What day of the week do I have my swimming lesson?", "Which evening is my French class?"]
             + [f"On which day is my {x} class?" for x in ACTIVITIES if x != act])
    return Scenario([[(u, a, True)]], [0], q, day, [])


def _ssa(rng, para, abs_):
    kind = rng.randrange(3)
    if kind == 0:
        dessert, event = _pick(rng, DESSERTS), _pick(rng, EVENTS)
        u = f"I need a dessert idea for my {event}, something that can be made a day ahead."
        a = f"I'd suggest a {dessert}: it keeps well overnight and travels easily."
        alias = EVENT_ALIAS[event]
        q = _ask(para, abs_,
                 [f"What dessert did you suggest for my {event}?", f"Which dessert did you recommend I make for my {event}?",
                  f"What was the make-ahead dessert you suggested for my {event}?",
                  f"For my {event}, what dessert idea did you give me?",
                  f"What dessert did you say would keep overnight for my {event}?"],
                 [f"Which sweet dish did you propose for my {event}?", f"Which sweet dish did you propose for the {alias}?",
                  f"What treat did you recommend I bake for the {alias}?",
                  f"What sweet thing did you tell me to bring to the {alias}?",
                  f"Which bake did you propose for the {alias}?"],
                 [f"What main course did you suggest for my {event}?", f"What appetizer did you suggest for my {event}?",
                  f"Which drinks did you recommend for my {event}?"]
                 + [f"What dessert did you suggest for my {e}?" for e in EVENTS if e != event])
        return Scenario([[(u, a, True)]], [0], q, dessert, [])
    if kind == 1:
        (book, author), city = _pick(rng, BOOKS), _pick(rng, CITIES)
        u = f"I'm flying to {city} next month. Can you recommend a novel for the flight?"
        a = f"Try '{book}' by {author}; it's absorbing and the chapters are short."
        land = COUNTRY_OF[city]
        q = _ask(para, abs_,
                 [f"Which author did you recommend for my flight to {city}?",
                  f"Who wrote the novel you recommended for my flight to {city}?",
                  f"Whose novel did you suggest I read on the flight to {city}?",
                  f"Who is the author of the novel you recommended for my flight to {city}?",
                  f"Which writer did you suggest for the flight to {city} next month?"],
                 ["Whose novel did you tell me to read on my flight?", "Which writer did you suggest I read on the plane?",
                  f"Whose book did you suggest for the plane ride to {land}?",
                  f"Who wrote the book you picked for my trip to {land}?",
                  f"Which writer did you propose for my journey to {land}?"],
                 [f"Which podcast did you recommend for my flight to {city}?",
                  f"Which film did you recommend for my flight to {city}?",
                  f"Which hotel did you recommend in {city}?"]
                 + [f"Which author did you recommend for my flight to {c}?" for c in CITIES if c != city])
        return Scenario([[(u, a, True)]], [0], q, author, [])
    city, place = _pick(rng, CITIES), _pick(rng, PLACES)
    u = f"Can you plan a three-day itinerary for {city}?"
    a = (f"Day one: walk the historic centre. Day two: spend the morning at {place} and have lunch nearby. "
         "Day three: take a day trip to the coast.")
    land = COUNTRY_OF[city]
    q = _ask(para, abs_,
             [f"What did you suggest for day two of my {city} itinerary?",
              f"Where did the {city} itinerary you planned send me on day two?",
              f"On day two of my three-day {city} itinerary, where should I go?",
              f"In the three-day {city} itinerary, where do I spend the morning of day two?",
              f"What was the morning stop on day two of my {city} itinerary?"],
             [f"In the {city} plan you made, where should I go the second day?",
              f"Where did you send me on my second morning in {land}?",
              f"For the second day of my {land} visit, which spot did you pick?",
              f"Which sight did you pick for my second morning in {land}?",
              f"During my stay in {land}, where did you say I should go on the second morning?"],
             [f"What did you suggest for day five of my {city} itinerary?",
              f"What did you suggest for day four of my {city} itinerary?",
              f"Which restaurant did you book for dinner on day two in {city}?"]
             + [f"What did you suggest for day two of my {c} itinerary?" for c in CITIES if c != city])
    return Scenario([[(u, a, True)]], [0], q, place, [])


def _requests(cores: list[str], occasions: list[str]) -> list[str]:
    return [c.format(o) for o in occasions for c in cores]


def _ssp(rng, para, abs_):
    kind = rng.randrange(3)
    if kind == 0:
        u = "I've switched to decaf coffee and herbal tea because caffeine ruins my sleep."
        a = "Good call; cutting caffeine after noon helps many people sleep better."
        q = _requests(["Can you suggest a drink for {}?", "What would you recommend I drink during {}?",
                       "Any ideas for something to sip during {}?"],
                      ["my afternoon break", "a long study session tonight", "my morning commute", "a late meeting",
                       "a quiet evening of reading", "the mid-afternoon slump at the office", "a road trip this weekend",
                       "brunch with friends"])
        ans = ("The user would prefer caffeine-free options such as decaf coffee or herbal tea; "
               "they would not want regular coffee or energy drinks.")
    elif kind == 1:
        u = "I've been vegetarian for two years, and I love spicy food, especially Thai and Indian dishes."
        a = "That opens up lots of options; lentils, tofu and chickpeas take spice beautifully."
        q = _requests(["Any ideas for what I could cook for {}?", "What should I make for {}?",
                       "Can you suggest a recipe for {}?"],
                      ["dinner tonight", "a weeknight dinner", "a potluck this weekend", "my lunchbox tomorrow",
                       "a dinner party with friends", "a cozy Sunday lunch", "a quick dinner after work",
                       "my meal prep this week"])
        ans = ("The user would prefer spicy vegetarian dishes, for example Thai or Indian recipes without meat; "
               "they would not want meat-based suggestions.")
    else:
        u = "I prefer quiet mountain trails to crowded beaches when I travel."
        a = "Mountain towns in the shoulder season are usually calm and beautiful."
        q = _requests(["Where should I go for {}?", "Can you recommend a destination for {}?",
                       "Any ideas for where to spend {}?"],
                      ["my next vacation", "a long weekend in the autumn", "my summer holiday", "a week off in May",
                       "a short getaway next month", "my birthday trip", "a few days to recharge",
                       "the time off after my project ends"])
        ans = ("The user would prefer a quiet mountain or hiking destination; "
               "they would not want a crowded beach resort.")
    if abs_:  # the gold answer says the music taste is missing, so every wording asks about music
        q = ["What kind of music do I like to listen to while working?", "Which music genre do I enjoy the most?",
             "Who is my favourite band?", "What kind of music do I usually put on when I cook?",
             "What kind of music do I like on long drives?", "Can you suggest a playlist in the style of music I like?",
             "Which singer do I listen to most often?", "What music do I put on to relax in the evening?"]
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
        q = _ask(para, abs_,
                 ["How many musical instruments have I bought?", "How many instruments have I bought recently?",
                  "How many instruments have I bought that I'm excited to learn?"]
                 + [f"How many musical instruments have I bought, including the {it}?" for it in items]
                 + [f"Counting the {it}, how many instruments have I just bought?" for it in items],
                 ["How many instruments do I own now that I've been shopping for music gear?",
                  "How many pieces of music gear have I purchased lately?",
                  "How many instruments have I added to my collection recently?",
                  "What's the total number of instruments I've acquired lately?",
                  "How many instruments have I picked up from music shops lately?"]
                 + [f"How many instruments have I acquired lately, the {INSTRUMENT_ALIAS[it]} included?" for it in items]
                 + [f"Counting the {INSTRUMENT_ALIAS[it]}, how many pieces of music gear have I purchased lately?"
                    for it in items],
                 [f"How many musical instruments has my {p} bought?" for p in PEOPLE]
                 + [f"How many instruments has my {p} been buying lately?" for p in PEOPLE])
        return Scenario(rounds, list(range(n)), q, str(n),
                        [("My friend bought a trumpet, but I'm not interested in brass.", "Brass is a very different skill.")])
    places = rng.sample(COUNTRIES, n)
    rounds = [[(f"I just got back from a trip to {c}; the food was incredible.",
                f"{c} is wonderful. What was your favourite dish?", True)] for c in places]
    q = _ask(para, abs_,
             ["How many countries have I visited on my trips?", "How many countries have I taken trips to recently?",
              "How many different countries have I been to on my recent trips?"]
             + [f"How many countries have I visited, counting my trip to {c}?" for c in places]
             + [f"Including {c}, how many countries have I just got back from?" for c in places],
             ["In how many different nations have I travelled recently?", "How many nations have I been to lately?",
              "How many separate nations have I journeyed to in recent months?",
              "What's the number of nations I've travelled to recently?",
              "How many different nations' cuisines have I tasted on my travels lately?"]
             + [f"Counting my time in {REGION_OF[c]}, how many nations have I travelled to lately?" for c in places]
             + [f"How many different nations have I toured recently, including the one in {REGION_OF[c]}?"
                for c in places],
             [f"How many countries has my {p} visited?" for p in PEOPLE]
             + [f"How many countries has my {p} travelled to this year?" for p in PEOPLE])
    return Scenario(rounds, list(range(n)), q, str(n), [])


def _between(firsts: list[str], seconds: list[str]) -> list[str]:
    """Every way to ask for the days from the first event to the second (either order where it reads well)."""
    out = []
    for x in firsts:
        for y in seconds:
            out += [f"How many days passed between {x} and {y}?", f"How many days were there between {x} and {y}?",
                    f"How much time, in days, lay between {y} and {x}?", f"How many days after {x} was {y}?",
                    f"How many days before {y} was {x}?", f"How many days separated {x} and {y}?"]
    return out


def _tr(rng, para, abs_):
    gap = rng.randint(3, 40)
    kind = rng.randrange(2)
    a_evt, b_evt = (("went to the dentist for a check-up", "dentist appointment"),
                    ("got back from my sister's wedding", "sister's wedding")) if kind == 0 else \
                   (("ran my first 10k race", "10k race"), ("started my new pottery course", "pottery course"))
    rounds = [[(f"Today I {a_evt[0]}.", "Thanks for sharing! How did it go?", True)],
              [(f"I {b_evt[0]} today.", "That sounds like a big day.", True)]]
    if kind == 0:
        plain_a = ["my dentist appointment", "my dental check-up", "my check-up at the dentist"]
        plain_b = ["my sister's wedding", "the day I got back from my sister's wedding"]
        para_a = ["my dental visit", "my teeth cleaning"]
        para_b = ["my sibling's marriage celebration", "the day my sibling tied the knot"]
    else:
        plain_a = ["my 10k race", "my first 10k race", "the day I ran my first 10k"]
        plain_b = ["my pottery course", "the start of my pottery course"]
        para_a = ["my ten-kilometre run", "my debut over ten kilometres"]
        para_b = ["the beginning of my ceramics lessons", "my opening ceramics lesson"]
    q = _ask(para, abs_, _between(plain_a, plain_b), _between(para_a, para_b),
             _between(plain_a, ["my job interview", "my cousin's graduation", "my flu shot"])
             + _between(["my job interview", "my move to a new flat"], plain_b))
    return Scenario(rounds, [0, gap], q, f"{gap} days", [])


def _ku(rng, para, abs_):
    kind = rng.randrange(3)
    if kind == 0:
        (c1, c2), (r1, r2) = rng.sample(COMPANIES, 2), rng.sample(ROLES, 2)
        rounds = [[(f"I work as a {r1} at {c1} and the hours are long.", "That sounds demanding; are you happy there?", True)],
                  [(f"Big news: I just started a new job as a {r2} at {c2}!", "Congratulations on the new role!", True)]]
        q = _ask(para, abs_,
                 ["Where do I work now?", "Which company do I work for now?", "Where am I working these days?",
                  f"I used to work at {c1}; where do I work now?", f"Now that I've left {c1}, which company do I work for?",
                  f"I was a {r1} at {c1} for a while; where do I work now?"],
                 ["Who is my current employer?", "Which organisation employs me at present?",
                  "Which firm am I with these days?", "Which employer did I most recently join?",
                  "Who pays my salary at the moment?",
                  f"Since leaving my {ROLE_ALIAS[r1]} position, which organisation employs me?",
                  f"I've moved on from my {ROLE_ALIAS[r1]} role; which firm am I with now?",
                  f"After my {ROLE_ALIAS[r1]} days, who became my employer?"],
                 [f"Where does my {p} work now?" for p in ["husband", "wife", "sister", "brother", "roommate", "best friend"]])
        return Scenario(rounds, [0, rng.randint(20, 90)], q, c2, [])
    if kind == 1:
        t1, t2 = rng.choice([(27, 25), (31, 29), (26, 24), (29, 27)])
        rounds = [[(f"My 5k personal best is {t1} minutes.", "Solid time! Intervals could bring it down.", True)],
                  [(f"I set a new 5k personal best today: {t2} minutes!", "Fantastic improvement!", True)]]
        q = _ask(para, abs_,
                 ["What is my 5k personal best?", "What's my current 5k personal best?", "What is my latest 5k personal best?",
                  f"My 5k personal best used to be {t1} minutes; what is it now?",
                  f"I once ran a 5k personal best of {t1} minutes. What's my best now?"],
                 ["What's my fastest time over five kilometres?", "How quickly can I run five kilometres now?",
                  "What's my quickest ever five-kilometre run?", "What record do I hold now over five kilometres?",
                  "What's my top five-kilometre result these days?", "What's my record for a five-kilometre run right now?",
                  "How long does my fastest five-kilometre run take?", "How fast can I cover five kilometres these days?"],
                 ["What is my marathon personal best?", "What is my half-marathon personal best?",
                  "What is my personal best for the mile?", "What's my best time in the 100-metre sprint?",
                  "What is my partner's 5k personal best?", "What is my sister's 5k personal best?"])
        return Scenario(rounds, [0, rng.randint(20, 90)], q, f"{t2} minutes", [])
    h1, h2 = rng.sample(HOODS, 2)
    rounds = [[(f"I live in {h1} and love the cafes there.", "It sounds like a lovely neighbourhood.", True)],
              [(f"We finally moved! Our new apartment is in {h2}.", "Congratulations on the move!", True)]]
    q = _ask(para, abs_,
             ["Which neighbourhood do I live in now?", "Which neighbourhood is our new apartment in?",
              "Where is my new apartment?", f"I used to live in {h1}; which neighbourhood am I in now?",
              f"Now that we've moved out of {h1}, which neighbourhood do we live in?",
              "Which neighbourhood did we move to?", f"Which neighbourhood did we move to from {h1}?",
              f"We moved away from {h1}; where is our new apartment?"],
             ["Which part of town is my home in these days?", "Which district do I reside in at present?",
              "What area of the city is my current place in?", "Which area do I call home at the moment?",
              "In which district is our current flat?", "Where's home for me these days?",
              "Which quarter of the city do I reside in now?", "Where did we relocate to?",
              "After our relocation, which district do we call home?", "Which district did our household relocate to?"],
             [f"Which neighbourhood does my {p} live in now?"
              for p in ["best friend", "sister", "brother", "aunt", "coworker", "cousin"]])
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


def _wording(sc: Scenario, phrasing: random.Random, asked: set[str]) -> str:
    """One of the scenario's wordings, drawn with the question's own rng; a wording another
    question of the file already asks is taken only when every one is taken (real benchmarks
    do not repeat a question)."""
    order = phrasing.sample(sc.questions, len(sc.questions))
    q = next((w for w in order if w not in asked), order[0])
    asked.add(q)
    return q


def _question(rng, qtype: str, qid: str, size: dict, para: bool, abs_: bool, phrasing: random.Random,
              asked: set[str]) -> dict:
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
        "question": _wording(sc, phrasing, asked),
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
    records, asked = [], set()
    plan = [(t, k, False) for t in QUESTION_TYPES for k in range(spec["per_type"])]
    plan += [(QUESTION_TYPES[i % len(QUESTION_TYPES)], i, True) for i in range(spec["n_abs"])]
    for qtype, k, abs_ in plan:
        base = hashlib.sha256(f"{seed}:{size}:{qtype}:{k}:{abs_}".encode()).hexdigest()[:8]
        qid = f"g{base}" + ("_abs" if abs_ else "")
        # the wording has its own rng: `rng` draws exactly what it drew before wordings existed
        phrasing = random.Random(f"synth-phrasing:{seed}:{size}:{qid}")
        records.append(_question(rng, qtype, qid, spec, para=(k % 2 == 1), abs_=abs_, phrasing=phrasing, asked=asked))
    rng.shuffle(records)
    return records


QUESTIONS_VERSION = "q2"  # q2: each question worded from several templates (the histories are as in q1)


def file_name(size: str, seed: int) -> str:
    """The file's default name; real-text files say so, and the questions' version is in it,
    so a cached file with other filler or other wordings is never reused."""
    chat = "_chat" if SIZES[size]["filler"] == "chat" else ""
    return f"synth_{size}_seed{seed}{chat}_{QUESTIONS_VERSION}.json"


def write(out_dir: str | Path, seed: int, size: str, path: str | Path | None = None) -> Path:
    """Write the file atomically (a crash never leaves a half-written benchmark behind)."""
    path = Path(path) if path else Path(out_dir) / file_name(size, seed)
    path.parent.mkdir(parents=True, exist_ok=True)
    # a temporary name of this process alone: shards of a stage may generate the same file at once
    tmp = path.with_name(f".{path.name}.{socket.gethostname()}.{os.getpid()}.tmp")
    tmp.write_bytes(dumps(seed, size))
    tmp.replace(path)
    return path


@functools.lru_cache(maxsize=2)  # the same seed and size give the same bytes: a process's dry runs build them once
def dumps(seed: int, size: str) -> bytes:
    """The file's bytes: what `write` writes, and what a dry run holds in memory instead (harness.data.source)."""
    return json.dumps(generate(seed, size), ensure_ascii=False).encode("utf-8")
