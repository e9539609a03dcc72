"""Generate the embedded demo datasets shipped in ``src/mathneuro/data/`` (deterministic; our own text).

* ``math_demo.jsonl``: grade-school word problems with worked solutions ending in ``#### N``
  (fields ``question``, ``answer``; the GSM8K layout, calculator notes ``<<a*b=c>>`` included).
* ``nonmath_demo.jsonl``: reading, knowledge and language items without arithmetic
  (fields ``instruction``, ``response``, ``qa`` = both joined, ``kind``).

Run ``python experiments/data/make_demo_data.py`` and commit the output; the same seed always gives
the same files.
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable
from pathlib import Path

OUT = Path(__file__).resolve().parents[2] / "src" / "mathneuro" / "data"
SEED = 20241016
NUM_MATH = 200

PEOPLE = [
    ("Amara", "she"), ("Bruno", "he"), ("Chen", "he"), ("Dalia", "she"), ("Emeka", "he"), ("Fatima", "she"),
    ("Gustav", "he"), ("Hana", "she"), ("Ivan", "he"), ("Jun", "she"), ("Kofi", "he"), ("Lena", "she"),
    ("Mateo", "he"), ("Nadia", "she"), ("Omar", "he"), ("Priya", "she"), ("Quinn", "they"), ("Rosa", "she"),
    ("Sami", "he"), ("Tova", "she"), ("Umar", "he"), ("Vera", "she"), ("Wes", "he"), ("Ximena", "she"),
    ("Yusuf", "he"), ("Zoe", "she"), ("Aiko", "she"), ("Ben", "he"), ("Carmen", "she"), ("Dev", "he"),
    ("Elif", "she"), ("Felix", "he"), ("Greta", "she"), ("Hugo", "he"), ("Ines", "she"), ("Jonas", "he"),
    ("Kira", "she"), ("Luca", "he"), ("Maya", "she"), ("Noor", "they"),
]
PRONOUNS = {
    "she": {"subj": "she", "obj": "her", "pos": "her", "Subj": "She", "has": "has", "is": "is"},
    "he": {"subj": "he", "obj": "him", "pos": "his", "Subj": "He", "has": "has", "is": "is"},
    "they": {"subj": "they", "obj": "them", "pos": "their", "Subj": "They", "has": "have", "is": "are"},
}


def person(rng: random.Random, exclude: tuple[str, ...] = ()) -> tuple[str, dict[str, str]]:
    """A random name and its pronoun forms."""
    while True:
        name, kind = rng.choice(PEOPLE)
        if name not in exclude:
            return name, PRONOUNS[kind]


def calc(expr: str, value: int) -> str:
    """``expr = <<expr=value>>value`` with ``*`` shown as in GSM8K's calculator notes."""
    return f"{expr} = <<{expr}={value}>>{value}"


def solution(steps: list[str], answer: int) -> str:
    return "\n".join(steps + [f"#### {answer}"])


# --------------------------------------------------------------------------- math templates
# Each returns (question, solution); every number is an integer and every result non-negative.


def shopping(rng: random.Random) -> tuple[str, str]:
    name, p = person(rng)
    (a_item, b_item) = rng.sample(["notebooks", "pens", "erasers", "folders", "markers", "rulers", "glue sticks"], 2)
    a, pa, b, pb = rng.randint(2, 6), rng.randint(2, 9), rng.randint(2, 8), rng.randint(1, 5)
    total = a * pa + b * pb
    bill = next(x for x in (20, 50, 100) if x > total)
    q = (f"{name} buys {a} {a_item} for ${pa} each and {b} {b_item} for ${pb} each. "
         f"{p['Subj']} pays with a ${bill} bill. How much change does {p['subj']} get back?")
    steps = [
        f"The {a_item} cost {calc(f'{a}*{pa}', a * pa)} dollars.",
        f"The {b_item} cost {calc(f'{b}*{pb}', b * pb)} dollars.",
        f"Together they cost {calc(f'{a * pa}+{b * pb}', total)} dollars.",
        f"The change is {calc(f'{bill}-{total}', bill - total)} dollars.",
    ]
    return q, solution(steps, bill - total)


def savings(rng: random.Random) -> tuple[str, str]:
    name, p = person(rng)
    s, w = rng.randint(3, 15), rng.randint(4, 12)
    gift = rng.randint(5, s * w - 1)
    thing = rng.choice(["a book", "a scarf", "a board game", "a kite", "a plant", "a puzzle"])
    q = (f"{name} saves ${s} every week for {w} weeks. Then {p['subj']} spends ${gift} on {thing} for a friend. "
         f"How many dollars {p['has']} {name} left?")
    steps = [
        f"{name} saves {calc(f'{s}*{w}', s * w)} dollars in total.",
        f"After buying {thing}, {calc(f'{s * w}-{gift}', s * w - gift)} dollars are left.",
    ]
    return q, solution(steps, s * w - gift)


def baking(rng: random.Random) -> tuple[str, str]:
    name, p = person(rng)
    food = rng.choice(["cookies", "muffins", "rolls", "tarts", "biscuits"])
    t, c = rng.randint(2, 5), rng.randint(6, 12)
    g, e = rng.randint(3, t * c // 2), rng.randint(1, 4)
    left = t * c - g - e
    q = (f"{name} bakes {t} trays of {food} with {c} {food} on each tray. {p['Subj']} gives {g} {food} to the "
         f"neighbours and eats {e}. How many {food} are left?")
    steps = [
        f"{name} bakes {calc(f'{t}*{c}', t * c)} {food}.",
        f"{p['Subj']} gives away and eats {calc(f'{g}+{e}', g + e)} {food}.",
        f"So {calc(f'{t * c}-{g + e}', left)} {food} are left.",
    ]
    return q, solution(steps, left)


def reading(rng: random.Random) -> tuple[str, str]:
    name, p = person(rng)
    r, d = rng.randint(8, 30), rng.randint(3, 9)
    rest_days = rng.randint(2, 6)
    pages = r * d + r * rest_days
    q = (f"A book has {pages} pages. {name} reads {r} pages every day. After {d} days, how many more days "
         f"does {p['subj']} need to finish the book at the same pace?")
    steps = [
        f"In {d} days {name} reads {calc(f'{r}*{d}', r * d)} pages.",
        f"{calc(f'{pages}-{r * d}', pages - r * d)} pages are left.",
        f"That takes {calc(f'{pages - r * d}/{r}', rest_days)} more days.",
    ]
    return q, solution(steps, rest_days)


def garden(rng: random.Random) -> tuple[str, str]:
    name, p = person(rng)
    plant = rng.choice(["tomato plants", "sunflowers", "lettuce heads", "rose bushes", "bean plants"])
    rows, per, died, extra = rng.randint(3, 9), rng.randint(4, 12), rng.randint(1, 6), rng.randint(2, 10)
    total = rows * per - died + extra
    q = (f"{name} plants {rows} rows of {plant} with {per} in each row. {died} of them do not survive, and later "
         f"{p['subj']} plants {extra} more. How many {plant} are in the garden now?")
    steps = [
        f"{name} plants {calc(f'{rows}*{per}', rows * per)} {plant} at first.",
        f"After {died} do not survive, {calc(f'{rows * per}-{died}', rows * per - died)} remain.",
        f"With {extra} more there are {calc(f'{rows * per - died}+{extra}', total)} {plant}.",
    ]
    return q, solution(steps, total)


def travel(rng: random.Random) -> tuple[str, str]:
    name, p = person(rng)
    v1, h1, v2, h2 = rng.choice([40, 45, 50, 55, 60]), rng.randint(2, 4), rng.choice([20, 30, 35]), rng.randint(1, 3)
    d1, d2 = v1 * h1, v2 * h2
    q = (f"{name} drives at {v1} miles per hour for {h1} hours on the highway, then at {v2} miles per hour for "
         f"{h2} hours through the hills. How many miles does {p['subj']} drive in total?")
    steps = [
        f"On the highway {p['subj']} drives {calc(f'{v1}*{h1}', d1)} miles.",
        f"Through the hills {p['subj']} drives {calc(f'{v2}*{h2}', d2)} miles.",
        f"In total that is {calc(f'{d1}+{d2}', d1 + d2)} miles.",
    ]
    return q, solution(steps, d1 + d2)


def fractions(rng: random.Random) -> tuple[str, str]:
    name, p = person(rng)
    friend, _ = person(rng, exclude=(name,))
    thing = rng.choice(["marbles", "stickers", "shells", "cards", "beads"])
    k = rng.choice([3, 4, 5])
    n = k * 2 * rng.randint(3, 10)
    give = n // k
    rest = n - give
    half = rest // 2
    q = (f"{name} has {n} {thing}. {p['Subj']} gives 1/{k} of them to {friend} and then half of the rest to "
         f"{p['pos']} cousin. How many {thing} does {name} keep?")
    steps = [
        f"{name} gives {friend} {calc(f'{n}/{k}', give)} {thing}.",
        f"That leaves {calc(f'{n}-{give}', rest)} {thing}.",
        f"Half of those is {calc(f'{rest}/2', half)}, so {name} keeps {half} {thing}.",
    ]
    return q, solution(steps, half)


def ages(rng: random.Random) -> tuple[str, str]:
    name, p = person(rng)
    a, b, c = rng.randint(5, 14), rng.randint(1, 4), rng.randint(2, 8)
    sib = 2 * a - b
    total = a + c + sib + c
    q = (f"{name} is {a} years old. {p['pos'].capitalize()} brother is {b} years younger than twice {name}'s age. "
         f"What will the sum of their ages be in {c} years?")
    steps = [
        f"The brother is {calc(f'2*{a}-{b}', sib)} years old.",
        f"In {c} years {name} will be {calc(f'{a}+{c}', a + c)} and the brother {calc(f'{sib}+{c}', sib + c)}.",
        f"The sum will be {calc(f'{a + c}+{sib + c}', total)} years.",
    ]
    return q, solution(steps, total)


def wages(rng: random.Random) -> tuple[str, str]:
    name, p = person(rng)
    job = rng.choice(["at a cafe", "at a bike shop", "as a tutor", "at a bookstore", "at an animal shelter"])
    w, h, d, bonus = rng.randint(9, 20), rng.randint(3, 8), rng.randint(3, 6), rng.choice([10, 15, 20, 25, 30])
    daily = w * h
    q = (f"{name} works {job} and earns ${w} an hour. {p['Subj']} works {h} hours a day for {d} days and gets a "
         f"${bonus} bonus at the end. How much does {p['subj']} earn in total?")
    steps = [
        f"Each day {p['subj']} earns {calc(f'{w}*{h}', daily)} dollars.",
        f"In {d} days that is {calc(f'{daily}*{d}', daily * d)} dollars.",
        f"With the bonus, {p['subj']} earns {calc(f'{daily * d}+{bonus}', daily * d + bonus)} dollars.",
    ]
    return q, solution(steps, daily * d + bonus)


def classroom(rng: random.Random) -> tuple[str, str]:
    pct, denom = rng.choice([(25, 4), (50, 2), (20, 5), (10, 10)])
    s = denom * 2 * rng.randint(2, 5)
    glasses = s // denom
    rest = s - glasses
    bus = rest // 2
    q = (f"A class has {s} students. {pct}% of them wear glasses. Half of the students without glasses take the "
         f"bus to school. How many students without glasses do not take the bus?")
    steps = [
        f"{calc(f'{s}*{pct}/100', glasses)} students wear glasses.",
        f"{calc(f'{s}-{glasses}', rest)} students do not wear glasses.",
        f"Half of them, {calc(f'{rest}/2', bus)}, take the bus, so {calc(f'{rest}-{bus}', rest - bus)} do not.",
    ]
    return q, solution(steps, rest - bus)


def pets(rng: random.Random) -> tuple[str, str]:
    name, p = person(rng)
    animal = rng.choice(["dogs", "cats", "rabbits", "goats"])
    f, n, days = rng.randint(1, 3), rng.randint(2, 4), rng.randint(5, 20)
    bag = f * n * days
    q = (f"{name} feeds each of {p['pos']} {n} {animal} {f} cups of food a day. A bag holds {bag} cups. "
         f"How many days does one bag last?")
    steps = [
        f"The {animal} eat {calc(f'{f}*{n}', f * n)} cups a day together.",
        f"One bag lasts {calc(f'{bag}/{f * n}', days)} days.",
    ]
    return q, solution(steps, days)


def sharing(rng: random.Random) -> tuple[str, str]:
    name, p = person(rng)
    k = rng.randint(3, 8)
    slices = rng.choice([6, 8, 10, 12])
    pizzas = k * rng.randint(1, 3)
    while (pizzas * slices) % k:
        pizzas += 1
    each = pizzas * slices // k
    self_word = {"she": "herself", "he": "himself", "they": "themself"}[p["subj"]]
    q = (f"{name} orders {pizzas} pizzas cut into {slices} slices each and shares them equally among {k} people, "
         f"including {self_word}. How many slices does each person get?")
    steps = [
        f"There are {calc(f'{pizzas}*{slices}', pizzas * slices)} slices.",
        f"Each person gets {calc(f'{pizzas * slices}/{k}', each)} slices.",
    ]
    return q, solution(steps, each)


def fundraiser(rng: random.Random) -> tuple[str, str]:
    group = rng.choice(["The school choir", "The chess club", "The swim team", "The art club", "The robotics team"])
    a, pa, b, pb = rng.randint(20, 60), rng.choice([2, 3, 4, 5]), rng.randint(10, 40), rng.choice([6, 8, 10])
    raised = a * pa + b * pb
    goal = raised + rng.choice([25, 40, 50, 75, 100, 120])
    q = (f"{group} sells {a} raffle tickets for ${pa} each and {b} cakes for ${pb} each. Its goal is ${goal}. "
         f"How many more dollars does it need to reach the goal?")
    steps = [
        f"The tickets bring in {calc(f'{a}*{pa}', a * pa)} dollars.",
        f"The cakes bring in {calc(f'{b}*{pb}', b * pb)} dollars.",
        f"Together that is {calc(f'{a * pa}+{b * pb}', raised)} dollars.",
        f"It still needs {calc(f'{goal}-{raised}', goal - raised)} dollars.",
    ]
    return q, solution(steps, goal - raised)


def fence(rng: random.Random) -> tuple[str, str]:
    name, p = person(rng)
    length, width, cost = rng.randint(5, 25), rng.randint(3, 15), rng.randint(2, 9)
    per = 2 * (length + width)
    q = (f"{name}'s rectangular garden is {length} meters long and {width} meters wide. Fencing costs ${cost} per "
         f"meter. How much does it cost to fence the whole garden?")
    steps = [
        f"Length plus width is {calc(f'{length}+{width}', length + width)} meters.",
        f"The perimeter is {calc(f'2*{length + width}', per)} meters.",
        f"The fence costs {calc(f'{per}*{cost}', per * cost)} dollars.",
    ]
    return q, solution(steps, per * cost)


def practice(rng: random.Random) -> tuple[str, str]:
    name, p = person(rng)
    skill = rng.choice(["the piano", "the violin", "chess", "drawing", "juggling", "the guitar"])
    m, n, k = rng.choice([15, 20, 25, 30, 40]), rng.choice([30, 45, 50, 60]), rng.randint(2, 4)
    week = 5 * m + 2 * n
    q = (f"{name} practises {skill} for {m} minutes on each weekday and {n} minutes on each day of the weekend. "
         f"How many minutes does {p['subj']} practise in {k} weeks?")
    steps = [
        f"On weekdays {p['subj']} practises {calc(f'5*{m}', 5 * m)} minutes a week.",
        f"On the weekend {p['subj']} practises {calc(f'2*{n}', 2 * n)} minutes.",
        f"One week is {calc(f'{5 * m}+{2 * n}', week)} minutes, "
        f"so {k} weeks are {calc(f'{week}*{k}', week * k)} minutes.",
    ]
    return q, solution(steps, week * k)


def discount(rng: random.Random) -> tuple[str, str]:
    name, p = person(rng)
    item = rng.choice(["jacket", "lamp", "backpack", "pair of shoes", "tent", "helmet"])
    pct = rng.choice([10, 20, 25, 50])
    price = rng.randint(2, 12) * 20
    off = price * pct // 100
    qty = rng.randint(2, 4)
    q = (f"A {item} costs ${price}. It is on sale for {pct}% off. {name} buys {qty} of them. "
         f"How much does {p['subj']} pay?")
    steps = [
        f"The discount is {calc(f'{price}*{pct}/100', off)} dollars.",
        f"One {item} now costs {calc(f'{price}-{off}', price - off)} dollars.",
        f"{qty} cost {calc(f'{price - off}*{qty}', (price - off) * qty)} dollars.",
    ]
    return q, solution(steps, (price - off) * qty)


def collection(rng: random.Random) -> tuple[str, str]:
    name, p = person(rng)
    thing = rng.choice(["stamps", "coins", "postcards", "comic books", "pressed leaves"])
    a, b, months, c = rng.randint(10, 80), rng.randint(3, 12), rng.randint(2, 9), rng.randint(5, 20)
    total = a + b * months - c
    q = (f"{name} has {a} {thing}. {p['Subj']} adds {b} {thing} every month for {months} months and then gives "
         f"{c} to a friend. How many {thing} does {p['subj']} have now?")
    steps = [
        f"{p['Subj']} adds {calc(f'{b}*{months}', b * months)} {thing}.",
        f"That makes {calc(f'{a}+{b * months}', a + b * months)} {thing}.",
        f"After giving {c} away, {p['subj']} {p['has']} {calc(f'{a + b * months}-{c}', total)} {thing}.",
    ]
    return q, solution(steps, total)


def water(rng: random.Random) -> tuple[str, str]:
    u, d, r = rng.randint(5, 20), rng.randint(2, 6), rng.randint(10, 40)
    tank = u * d + rng.randint(10, 60)
    after = tank - u * d + r
    place = rng.choice(["A farm", "A camp", "A greenhouse", "A school garden"])
    q = (f"{place} has a water tank with {tank} liters. It uses {u} liters a day. After {d} days, {r} liters of "
         f"rain fall into the tank. How many liters are in the tank now?")
    steps = [
        f"In {d} days it uses {calc(f'{u}*{d}', u * d)} liters.",
        f"{calc(f'{tank}-{u * d}', tank - u * d)} liters are left before the rain.",
        f"After the rain there are {calc(f'{tank - u * d}+{r}', after)} liters.",
    ]
    return q, solution(steps, after)


def comparison(rng: random.Random) -> tuple[str, str]:
    a_name, _ = person(rng)
    b_name, _ = person(rng, exclude=(a_name,))
    c_name, _ = person(rng, exclude=(a_name, b_name))
    fruit = rng.choice(["apples", "plums", "pears", "oranges", "lemons"])
    x, extra = rng.randint(3, 15), rng.choice([2, 4, 6])
    y = 2 * x + extra
    z = y // 2
    q = (f"{a_name} picks {x} {fruit}. {b_name} picks {extra} more than twice as many as {a_name}. {c_name} picks half "
         f"as many as {b_name}. How many {fruit} do they pick altogether?")
    steps = [
        f"{b_name} picks {calc(f'2*{x}+{extra}', y)} {fruit}.",
        f"{c_name} picks {calc(f'{y}/2', z)} {fruit}.",
        f"Altogether they pick {calc(f'{x}+{y}+{z}', x + y + z)} {fruit}.",
    ]
    return q, solution(steps, x + y + z)


def recipe(rng: random.Random) -> tuple[str, str]:
    name, p = person(rng)
    f, n, times, price = rng.randint(2, 4), rng.choice([6, 8, 12]), rng.randint(2, 5), rng.randint(1, 3)
    m = n * times
    cups = f * times
    q = (f"A recipe uses {f} cups of flour for {n} pancakes. {name} wants to make {m} pancakes, and flour costs "
         f"${price} per cup. How much does the flour cost?")
    steps = [
        f"{m} pancakes is {calc(f'{m}/{n}', times)} batches.",
        f"That needs {calc(f'{f}*{times}', cups)} cups of flour.",
        f"The flour costs {calc(f'{cups}*{price}', cups * price)} dollars.",
    ]
    return q, solution(steps, cups * price)


MATH_TEMPLATES: list[Callable[[random.Random], tuple[str, str]]] = [
    shopping, savings, baking, reading, garden, travel, fractions, ages, wages, classroom,
    pets, sharing, fundraiser, fence, practice, discount, collection, water, comparison, recipe,
]


def make_math(rng: random.Random, count: int = NUM_MATH) -> list[dict]:
    rows, seen = [], set()
    while len(rows) < count:
        template = MATH_TEMPLATES[len(rows) % len(MATH_TEMPLATES)]
        question, answer = template(rng)
        if question in seen:
            continue
        seen.add(question)
        rows.append({"question": question, "answer": answer})
    return rows


# --------------------------------------------------------------------------- non-math items

PLACES = {
    "the library": ("a quiet corner by the window", "an old map of the town tucked inside a novel"),
    "the market": ("the stall that sold spices", "a lost glove with a tiny bell sewn on it"),
    "the park": ("the bench under the oak tree", "a wooden whistle half hidden in the grass"),
    "the harbor": ("the end of the long pier", "a glass float that had drifted in with the tide"),
    "the museum": ("the hall of old clocks", "a postcard that someone had left on a bench"),
    "the train station": ("the platform cafe", "a ticket from a journey taken long ago"),
    "the botanical garden": ("the warm glasshouse", "a seed packet with a handwritten label"),
    "the farm": ("the barn with the red door", "a brand-new lamb curled up in the straw"),
    "the beach": ("the rocks at the far end", "a smooth green stone shaped like a heart"),
    "the bakery": ("the counter near the ovens", "a recipe card written in careful handwriting"),
}
WEATHER = ["bright and sunny", "grey and drizzly", "windy and cold", "foggy in the early hours",
           "warm with a light breeze"]
REASONS = [  # (what the passage says, how the answer puts it); {subj} is the pronoun
    ("wanted to find a birthday present for a friend", "to find a birthday present for a friend"),
    ("needed a quiet place to think", "because {subj} needed a quiet place to think"),
    ("had promised to help a neighbour", "because of a promise to help a neighbour"),
    ("hoped to find ideas for a school project", "to look for ideas for a school project"),
    ("wanted to sketch something new", "to sketch something new"),
    ("had arranged to meet an old friend", "to meet an old friend"),
]
FEELINGS = [("delighted", "happy and surprised"), ("curious", "eager to learn more"),
            ("calm", "peaceful and relaxed"), ("proud", "pleased with what {subj} had done"),
            ("thoughtful", "quietly reflective")]
ENDINGS = [
    "took it to the front desk so that its owner could find it",
    "decided to write a short story about it",
    "showed it to a friend that evening",
    "kept it safe in a small wooden box at home",
    "asked a staff member about where it came from",
]


def make_reading(rng: random.Random, count: int) -> list[dict]:
    rows, seen = [], set()
    place_names = list(PLACES)
    while len(rows) < count:
        name, p = person(rng)
        place = rng.choice(place_names)
        spot, found = PLACES[place]
        weather = rng.choice(WEATHER)
        reason, reason_answer = rng.choice(REASONS)
        feeling, feeling_gloss = rng.choice(FEELINGS)
        ending = rng.choice(ENDINGS)
        passage = (
            f"The day was {weather} when {name} went to {place}. {p['Subj']} {reason}. "
            f"Near {spot}, {p['subj']} noticed {found}. {name} felt {feeling} and {ending}."
        )
        kind = rng.choice(["where", "why", "what", "feel", "weather", "then"])
        if kind == "where":
            question, answer = f"Where did {name} go?", f"{name} went to {place}."
        elif kind == "why":
            question = f"Why did {name} go to {place}?"
            answer = f"{name} went there {reason_answer.format(subj=p['subj'])}."
        elif kind == "what":
            question, answer = f"What did {name} notice near {spot}?", f"{p['Subj']} noticed {found}."
        elif kind == "feel":
            question = f"How did {name} feel after noticing it?"
            answer = f"{name} felt {feeling}, that is, {feeling_gloss.format(subj=p['subj'])}."
        elif kind == "weather":
            question, answer = "What was the weather like that day?", f"It was {weather}."
        else:
            question, answer = f"What did {name} do with what {p['subj']} found?", f"{p['Subj']} {ending}."
        instruction = f"Read the passage and answer the question.\n\nPassage: {passage}\n\nQuestion: {question}"
        if instruction in seen:
            continue
        seen.add(instruction)
        rows.append({"instruction": instruction, "response": answer, "kind": "reading"})
    return rows


KNOWLEDGE = [
    ("Which gas do plants take in from the air to make their food?", "Plants take in carbon dioxide."),
    ("What do bees collect from flowers to make honey?", "Bees collect nectar."),
    ("Why do we see lightning before we hear thunder?",
     "Light travels much faster than sound, so the flash reaches us first."),
    ("What is the name of the process in which water vapour turns back into liquid?", "It is called condensation."),
    ("Which organ pumps blood around the human body?", "The heart pumps blood around the body."),
    ("What do caterpillars turn into?", "Caterpillars turn into butterflies or moths."),
    ("Why do people wear light-coloured clothes in hot weather?",
     "Light colours reflect more sunlight, so they stay cooler."),
    ("What is the main job of the roots of a plant?",
     "Roots hold the plant in place and take up water and minerals from the soil."),
    ("Which animal is known for building dams across streams?", "The beaver builds dams."),
    ("What causes a shadow?", "A shadow forms where an object blocks light."),
    ("What is the frozen form of water called?", "It is called ice."),
    ("Why should you wash your hands before eating?", "Washing removes germs that could make you ill."),
    ("Which season comes after autumn?", "Winter comes after autumn."),
    ("What do we call a person who designs buildings?", "Such a person is called an architect."),
    ("What instrument do sailors traditionally use to find north?", "They use a compass."),
    ("Which part of the eye controls how much light enters it?",
     "The iris controls this by changing the size of the pupil."),
    ("What is the name for animals that eat only plants?", "They are called herbivores."),
    ("Why do leaves of many trees change colour in autumn?",
     "The green pigment breaks down, revealing yellow and orange pigments."),
    ("What do you call a word that means the same as another word?", "It is called a synonym."),
    ("Which material is made by melting sand at high temperatures?", "Glass is made that way."),
    ("What is the purpose of a lighthouse?",
     "A lighthouse warns ships of danger and helps them find their way at night."),
    ("What do we call the layer of gases that surrounds the Earth?", "It is called the atmosphere."),
    ("Why does a metal spoon in hot soup become warm?", "Metal conducts heat from the soup to the handle."),
    ("Which bird is famous for copying human speech?", "The parrot is famous for it."),
    ("What do you call frozen rain that falls as small balls of ice?", "It is called hail."),
    ("What is a library card used for?", "It lets you borrow books and other items from a library."),
    ("Why do astronauts float inside a space station?",
     "They and the station are falling around the Earth together, so they feel weightless."),
    ("What is the job of a firefighter?", "A firefighter puts out fires and rescues people in danger."),
    ("What do we call the young of a frog?", "They are called tadpoles."),
    ("Which planet is known as the Red Planet?", "Mars is known as the Red Planet."),
    ("What is the opposite of the word 'generous'?", "The opposite is 'selfish' or 'stingy'."),
    ("Why do we have day and night?", "The Earth spins, so each place faces the Sun and then turns away from it."),
    ("What does a thermometer measure?", "A thermometer measures temperature."),
    ("What do we call a very large area of sand with little rain?", "It is called a desert."),
    ("Which sense do we use to smell a flower?", "We use the sense of smell, through the nose."),
    ("What is recycling?", "Recycling is turning used materials into new products instead of throwing them away."),
    ("What do you call the person who leads an orchestra?", "The person is called a conductor."),
    ("Why do ice cubes float in a drink?", "Ice is less dense than liquid water, so it floats."),
    ("What is a habitat?", "A habitat is the natural home of a plant or animal."),
    ("Which animal is often called the ship of the desert?", "The camel is called the ship of the desert."),
    ("What do we call a story that explains how something in nature came to be, told long ago?",
     "Such a story is called a myth."),
    ("What is the main ingredient of guacamole?", "The main ingredient is avocado."),
    ("Why should you not touch a hot stove?", "It can burn your skin."),
    ("What do we call a place where films are shown to the public?", "It is called a cinema."),
    ("Which kind of scientist studies rocks?", "A geologist studies rocks."),
    ("What do you need to keep a houseplant healthy?",
     "It needs light, water, the right temperature and some nutrients."),
    ("What is the name of the line where the sky seems to meet the land or sea?", "It is called the horizon."),
    ("What does a pharmacist do?", "A pharmacist prepares and gives out medicines and explains how to use them."),
    ("Why do cats have whiskers?", "Whiskers help cats sense their surroundings, especially in the dark."),
    ("What is a dictionary used for?", "A dictionary gives the meanings, spellings and pronunciations of words."),
    ("Which tool is used to cut paper?", "Scissors are used to cut paper."),
    ("What is the main purpose of a seatbelt?", "It holds passengers in place to protect them in a sudden stop."),
    ("What do we call the scientific study of the weather?", "It is called meteorology."),
    ("What happens to a puddle on a sunny day?", "The water evaporates and the puddle dries up."),
    ("Which food group do bread and rice belong to?", "They belong to the grains, or starchy foods."),
    ("What is an island?", "An island is a piece of land surrounded by water."),
    ("Why do some animals hibernate?", "They sleep through the winter to save energy when food is scarce."),
    ("What does a postal worker deliver?", "A postal worker delivers letters and parcels."),
    ("What is the opposite of 'ancient'?", "The opposite is 'modern'."),
    ("What gives a rainbow its colours?", "Sunlight is split into its colours by raindrops."),
]

OPPOSITES = [("bright", "dim"), ("early", "late"), ("brave", "fearful"), ("narrow", "wide"), ("rough", "smooth"),
             ("noisy", "quiet"), ("shallow", "deep"), ("tidy", "messy"), ("heavy", "light"), ("polite", "rude")]
PAST = [("Maya goes to the market.", "Maya went to the market."),
        ("The children sing a song.", "The children sang a song."),
        ("Omar writes a letter to his aunt.", "Omar wrote a letter to his aunt."),
        ("The dog runs across the field.", "The dog ran across the field."),
        ("We eat lunch in the garden.", "We ate lunch in the garden."),
        ("Lena buys fresh bread.", "Lena bought fresh bread."),
        ("The wind blows the leaves away.", "The wind blew the leaves away."),
        ("They swim in the lake.", "They swam in the lake."),
        ("Hugo catches the ball.", "Hugo caught the ball."),
        ("The bell rings at noon.", "The bell rang at noon.")]
ODD_ONE = [(["apple", "banana", "carrot", "cherry"], "carrot", "it is a vegetable and the others are fruits"),
           (["robin", "sparrow", "salmon", "owl"], "salmon", "it is a fish and the others are birds"),
           (["violin", "cello", "trumpet", "harp"], "trumpet", "it is a brass instrument and the others have strings"),
           (["oak", "maple", "tulip", "birch"], "tulip", "it is a flower and the others are trees"),
           (["hammer", "saw", "spoon", "drill"], "spoon", "it is kitchen cutlery and the others are workshop tools"),
           (["red", "blue", "square", "green"], "square", "it is a shape and the others are colours"),
           (["Monday", "Friday", "April", "Sunday"], "April", "it is a month and the others are days"),
           (["shirt", "sock", "scarf", "plate"], "plate", "it is not something you wear"),
           (["river", "lake", "mountain", "pond"], "mountain", "it is not a body of water"),
           (["whisper", "shout", "mumble", "jump"], "jump", "it is not a way of speaking")]
PLURALS = [("child", "children"), ("mouse", "mice"), ("leaf", "leaves"), ("box", "boxes"), ("tooth", "teeth"),
           ("knife", "knives"), ("city", "cities"), ("sheep", "sheep"), ("foot", "feet"), ("wolf", "wolves")]


def make_language(rng: random.Random) -> list[dict]:
    rows = []
    for word, opposite in OPPOSITES:
        rows.append({"instruction": f"Give a word that means the opposite of '{word}'.",
                     "response": f"The opposite of '{word}' is '{opposite}'."})
    for present, past in PAST:
        rows.append({"instruction": f"Rewrite the sentence in the past tense: {present}", "response": past})
    for words, odd, why in ODD_ONE:
        shuffled = words[:]
        rng.shuffle(shuffled)
        rows.append({"instruction": f"Which word does not belong with the others: {', '.join(shuffled)}?",
                     "response": f"'{odd}' does not belong, because {why}."})
    for singular, plural in PLURALS:
        rows.append({"instruction": f"What is the plural of '{singular}'?",
                     "response": f"The plural of '{singular}' is '{plural}'."})
    for row in rows:
        row["kind"] = "language"
    return rows


def make_nonmath(rng: random.Random) -> list[dict]:
    knowledge = [{"instruction": q, "response": a, "kind": "knowledge"} for q, a in KNOWLEDGE]
    language = make_language(rng)
    reading = make_reading(rng, 200 - len(knowledge) - len(language))
    rows = reading + knowledge + language
    rng.shuffle(rows)
    for row in rows:
        row["qa"] = f"{row['instruction']}\n{row['response']}"
    return [{"instruction": r["instruction"], "response": r["response"], "qa": r["qa"], "kind": r["kind"]}
            for r in rows]


def write_jsonl(path: Path, rows: list[dict]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        for row in rows:
            f.write(json.dumps(row, ensure_ascii=False) + "\n")
    print(f"{path}: {len(rows)} records, {path.stat().st_size / 1024:.0f} KB")


def main() -> None:
    write_jsonl(OUT / "math_demo.jsonl", make_math(random.Random(SEED)))
    write_jsonl(OUT / "nonmath_demo.jsonl", make_nonmath(random.Random(SEED + 1)))


if __name__ == "__main__":
    main()
