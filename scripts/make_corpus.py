"""Writes ``saltmarsh_line.txt``: the log book of the Saltmarsh Light Railway, a coastal line we made up.

The course's own text for chapter 10's character-level language model. Every sentence pattern, name and place
below was written for this course; a seeded random generator picks among them, so the log is varied but regular
(dates, weather, trains, passengers, small events), which is what a tiny model can learn in a minute.
Deterministic: ``python scripts/make_corpus.py`` rewrites ``attention_course/data/saltmarsh_line.txt`` byte for
byte. A maintainer's tool, kept out of the package (which ships only ``data/*.txt``) so the text can be remade or
extended.
"""
from __future__ import annotations

import datetime
import random
from pathlib import Path

SEED = 1921
OUT = Path(__file__).resolve().parent.parent / "attention_course" / "data" / "saltmarsh_line.txt"

PREFACE = """THE LOG BOOK OF THE SALTMARSH LIGHT RAILWAY

Kept at Gullhaven station by the clerks of the line, one entry for each working day.

The line runs for nineteen miles along the coast, from Gullhaven in the south to Westreach in the north.
Its stations, in order, are Gullhaven, Saltmarsh Halt, Cobble Point, Heronford, Lantern Cove, Marrow Bay,
Fennick Junction and Westreach. Between Cobble Point and Heronford the rails cross the estuary on a low
timber bridge, and at high spring tides the water comes within a hand of the sleepers. North of Lantern
Cove the line climbs through a cutting in the chalk, the only hill on the whole railway, and the engines
must be given a good fire before they try it.

The company owns four engines. Curlew and Petrel are the small tank engines that work the passenger
trains. Marigold is older and slower and hauls the goods. Old Tom is kept in the shed at Fennick Junction
and is lit only when one of the others is sick. There are six coaches, two vans for fish and parcels,
and a long line of coal wagons that belong to the harbour at Marrow Bay.

The rules of this book are simple. Write the date, the weather, the trains and anything out of the
ordinary. Write plainly. If a train is late, say why. If nothing happened, say that nothing happened.

"""

STATIONS = ["Gullhaven", "Saltmarsh Halt", "Cobble Point", "Heronford", "Lantern Cove", "Marrow Bay",
            "Fennick Junction", "Westreach"]
PASSENGER_ENGINES = ["Curlew", "Petrel"]
MASTERS = {"Gullhaven": "Mr. Harrow", "Saltmarsh Halt": "Mrs. Pell", "Cobble Point": "Mr. Dunmore",
           "Heronford": "Mr. Tully", "Lantern Cove": "Miss Wren", "Marrow Bay": "Mr. Gorse",
           "Fennick Junction": "Mr. Abbot", "Westreach": "Mrs. Lowther"}
CLERKS = ["J. Harrow", "E. Marsh", "T. Penrose", "A. Wilde"]
DRIVERS = ["Ned Carter", "Sam Oakes", "Will Bray", "Harry Finch"]
FOLK = ["old Mrs. Alder", "the vicar of Heronford", "two schoolboys", "a painter with an easel",
        "the doctor from Marrow Bay", "a family of five", "a sailor on leave", "the postman",
        "Mr. Gorse's nephew", "a lady with a parrot in a cage", "three fishwives", "a man selling brushes",
        "the harbour master", "a party of walkers", "the schoolmistress", "a farmer and his dog"]
CARGO = ["crates of herring", "sacks of coal", "barrels of oysters", "bales of wool", "boxes of apples",
         "churns of milk", "bundles of newspapers", "sacks of flour", "baskets of eggs", "rolls of fencing wire",
         "crates of crabs", "loads of timber"]
MONTHS = ["January", "February", "March", "April", "May", "June", "July", "August", "September", "October",
          "November", "December"]
DAYS = ["Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday"]
NUMBERS = ["no", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten", "eleven",
           "twelve"]

SKY = {
    "winter": ["hard frost at dawn, bright and still all day", "sleet from the north-east, very cold",
               "grey and raw, wind from the east", "snow in the night, two inches at Westreach",
               "gale from the south-west, heavy seas at Marrow Bay", "fog until noon, then thin sunshine",
               "rain all day, the estuary high and brown"],
    "spring": ["showers and bright spells, wind from the west", "mild and grey, a little drizzle",
               "clear and fresh, wind light from the north", "fog on the marsh at dawn, clearing by nine",
               "warm sun, the first swallows at Heronford", "blustery, rain in the afternoon"],
    "summer": ["hot and still, the rails shimmering by noon", "fine, a sea breeze in the afternoon",
               "thunder in the evening, heavy rain for an hour", "clear and warm all day",
               "sea mist at dawn, hot later", "fine and dry, wind light from the south"],
    "autumn": ["wind from the south-west, rain at times", "still and misty, leaves on the line",
               "bright and cold, first frost on the marsh", "gale in the night, calmer by noon",
               "grey and damp, fog on the estuary", "mild and fine, a red sunset"],
}
SEASON = ["winter", "winter", "spring", "spring", "spring", "summer", "summer", "summer", "autumn", "autumn",
          "autumn", "winter"]

DELAYS = ["sheep on the line near Cobble Point", "a cow on the estuary bridge", "a slow fire in the engine",
          "waiting for the fish van at Heronford", "a hot axle box on the second coach",
          "the signal at Lantern Cove stuck at danger", "a fallen branch in the chalk cutting",
          "a long wait for the goods at Fennick Junction", "wet rails in the cutting, the wheels slipping",
          "a passenger who had lost his ticket and would not pay again",
          "the level crossing gates at Saltmarsh Halt frozen shut"]

SMALL = [
    "{folk} travelled from {a} to {b} and said it was the finest view on the coast.",
    "At {a}, {master} planted a row of marigolds along the platform.",
    "{folk} left an umbrella on the {t} up train. It is kept in the office at Gullhaven.",
    "A dog followed the {t} train from {a} as far as {b}, and was sent back on the next train down.",
    "{master} of {a} reports that the lamp on the platform is broken again.",
    "The ganger walked the line from {a} to {b} and found two loose keys, which he knocked home.",
    "{folk} asked whether the railway would ever reach the lighthouse. The clerk said not this year.",
    "Gulls stole a loaf from the parcels van at {a}.",
    "The water tank at {a} was filled; the pump needs a new washer.",
    "{driver} gave {folk} a ride on the footplate from {a} to {b}. This is not allowed and will not happen again.",
    "A wagon of {cargo} was left at {a} by mistake and fetched back by Marigold in the evening.",
    "{folk} brought a cake to the booking office at {a} for no reason at all.",
    "The clock at {a} was found to be six minutes slow and was set right.",
    "Painters began work on the footbridge at {a}. It is to be green, as before.",
    "A heron stood on the down platform at {b} for most of the morning.",
    "{folk} missed the last train at {a} and walked home along the shore.",
    "The ticket window at {a} would not open; {master} sold tickets through the door.",
    "At {b} the station cat had four kittens in the lamp room.",
    "{master} of {a} asks for more coal for the waiting room stove.",
    "The fish van came back from {b} smelling worse than usual and was scrubbed out at {a}.",
    "{folk} asked {master} at {a} which train was the fastest. {master} said they were all the same speed.",
    "A boy was seen putting pennies on the rails near {a}. His father has been told.",
    "The whistle of {engine} sounded hoarse all day; {driver} says it wants cleaning.",
    "{driver} found a lost lamb in the cutting and carried it to {b} on the footplate.",
    "Two new benches arrived for the platform at {a}.",
    "The tide came over the road at {a}, and passengers walked to the station on the sea wall.",
    "A basket of {cargo_one} was sent from {a} to {master} at {b}, with no name on it.",
    "The daughter of {master} of {a} was married at {b}, and the {t} train was decorated with ribbons.",
    "A telegram for {master} at {a} was carried up by hand because the wire was down.",
    "{engine} was taken out of service at {a} with a leaking tube and Old Tom was lit in her place.",
    "{folk} sketched the estuary bridge from the platform at {b} all afternoon.",
    "The booking office at {a} sold {n} tickets before nine in the morning, a record for the station.",
    "The new timetable was pasted up at every station from {a} to {b}.",
    "The porter at {a} chased a goat off the platform with a broom.",
    "A crate of {cargo_one} burst open at {b}. Nothing was lost but time.",
]
# A few days the clerks wrote about at length, keyed by (month, day): (weather, the day's story), in 1921 only.
LONG_DAYS = {
    (2, 14): ("gale from the south-west all night and all morning, rain", """The storm that began last night did not stop until the afternoon. At high water the sea came over
the estuary bridge, and Mr. Tully would not let the 7.20 cross until the ganger had walked it with a lamp.
Two sleepers had lifted at the north end and were nailed down again. Every train after that ran at walking
pace over the bridge, and nobody complained, because everybody had seen the water."""),
    (5, 21): ("fine and hot, a fresh breeze off the sea", """Regatta day at Marrow Bay. Both passenger engines were out from dawn, and Old Tom was lit to help,
which he did not enjoy. The company ran eleven trains each way instead of four. The platform at Marrow Bay
was so full that Mr. Gorse stood on a barrow to call out the trains. One small girl was lost and found
again asleep in the parcels van. Takings for the day were the best since the line was opened."""),
    (7, 3): ("clear and warm, wind light from the west", """The inspector from the county came to look at the line. He rode the whole way on the footplate of
Curlew, asked a great many questions about the bridge, measured the platform at Saltmarsh Halt with a
tape, and said it was two feet too short. He ate his lunch at Lantern Cove and praised Miss Wren's
flowers. His report will come by post. The clerks are not worried."""),
    (9, 30): ("still and golden, cold after dark", """The harvest special ran today from Westreach to Gullhaven with every coach the company owns.
Farmers and their families came down to the harbour fair, and Marigold followed with a train of empty
wagons for the fruit. Coming back up the chalk cutting in the dark, the special stalled twice, and the
passengers got out and walked beside it to the top, singing."""),
    (11, 24): ("cold, snow from the late afternoon", """The Christmas train. Curlew was hung with holly and a lamp in every window of the coaches, and
Father Christmas, who looked a good deal like Mr. Abbot of Fennick Junction, gave an orange to every child
on the line. Snow began to fall at Heronford and lay on the roofs of the coaches all the way to Westreach."""),
    (3, 2): ("bright and breezy, the harbour calm", """A new coach arrived by sea at Marrow Bay and was lifted onto the rails by the harbour crane. It is
painted brown and cream like the others, but it has electric lamps instead of oil, and the passengers
spent the first trip switching them on and off. Mr. Harrow says the novelty will wear off by summer."""),
}
QUIET = ["Nothing out of the ordinary.", "A quiet day on the line.", "No other events.",
         "All trains ran and nothing else happened.", "Nothing further to report."]


def clock(rng: random.Random, start: int, end: int) -> str:
    """A departure time like 7.40 between start and end o'clock."""
    return f"{rng.randint(start, end)}.{rng.choice(['00', '05', '10', '15', '20', '25', '30', '40', '45', '50'])}"


def count(rng: random.Random, n: int) -> str:
    """Small counts in words half the time, digits otherwise: the model sees both."""
    return NUMBERS[n] if n < len(NUMBERS) and rng.random() < 0.5 else str(n)


def passenger_train(rng: random.Random, season: str) -> str:
    up = rng.random() < 0.5
    a, b = ("Gullhaven", "Westreach") if up else ("Westreach", "Gullhaven")
    t, engine = clock(rng, 6, 19), rng.choice(PASSENGER_ENGINES)
    people = rng.randint(3, 60 if season == "summer" else 25)
    late = rng.random() < 0.3
    if late:
        minutes = rng.choice([4, 7, 9, 12, 15, 20, 25, 35])
        return (f"The {t} from {a} ran {minutes} minutes late behind {engine}, because of "
                f"{rng.choice(DELAYS)}. It carried {count(rng, people)} passengers.")
    form = rng.randrange(3)
    if form == 0:
        return f"The {t} from {a} left on time behind {engine} with {count(rng, people)} passengers."
    if form == 1:
        return f"{engine} worked the {t} from {a} to {b}; {count(rng, people)} passengers, on time throughout."
    way = "up" if up else "down"  # up trains run north, towards Westreach
    return f"The {t} {way} train left {a} on time. {engine}, {count(rng, people)} passengers, all well."


def goods_train(rng: random.Random) -> str:
    n, cargo = rng.randint(2, 14), rng.choice(CARGO)
    a, b = rng.sample(STATIONS, 2)
    form = rng.randrange(3)
    if form == 0:
        return f"Marigold took the goods from {a} to {b}: {count(rng, n)} wagons, most of them {cargo}."
    if form == 1:
        return f"The goods train carried {count(rng, n)} {cargo} from {a}. Marigold was slow on the bank but got there."
    way = "north" if STATIONS.index(b) > STATIONS.index(a) else "south"
    return f"At {a}, {count(rng, n)} {cargo} were loaded for {b} and went {way} with Marigold."


def small_event(rng: random.Random) -> str:
    a, b = rng.sample(STATIONS, 2)
    text = rng.choice(SMALL).format(folk=rng.choice(FOLK), a=a, b=b, master=MASTERS[a], t=clock(rng, 6, 19),
                                    driver=rng.choice(DRIVERS), cargo=rng.choice(CARGO),
                                    engine=rng.choice(PASSENGER_ENGINES), n=rng.randint(20, 90),
                                    cargo_one=rng.choice(CARGO).split(" of ")[-1])
    return text[0].upper() + text[1:]


def entry(rng: random.Random, year: int, month: int, day: int, weekday: int) -> str:
    name = MONTHS[month]
    season = SEASON[month]
    lines = [f"{DAYS[weekday]}, {day} {name} {year}.", f"Weather: {rng.choice(SKY[season])}."]
    if (month, day) in LONG_DAYS and year == 1921:
        weather, story = LONG_DAYS[(month, day)]
        lines[1] = f"Weather: {weather}."
        lines.append(story.replace("\n", " "))
    elif weekday == 6:
        lines.append(rng.choice(["Sunday. One train each way, both on time.", "Sunday. No trains ran.",
                                 "Sunday. The engines were washed out at Fennick Junction."]))
    else:
        lines += [passenger_train(rng, season) for _ in range(rng.randint(1, 3))]
        if rng.random() < 0.6:
            lines.append(goods_train(rng))
        events = [small_event(rng) for _ in range(rng.choice([0, 1, 1, 2]))]
        lines += events or [rng.choice(QUIET)]
    lines.append(f"Signed, {rng.choice(CLERKS)}.")
    return "\n".join(lines) + "\n\n"


def main() -> None:
    rng = random.Random(SEED)
    parts, day = [PREFACE], datetime.date(1921, 1, 1)
    size = len(PREFACE)
    while size < 90_000:
        if rng.random() < 0.28 or (day.month - 1, day.day) in LONG_DAYS and day.year == 1921:  # not every day
            text = entry(rng, day.year, day.month - 1, day.day, day.weekday())
            parts.append(text)
            size += len(text)
        day += datetime.timedelta(days=1)
    OUT.write_text("".join(parts).rstrip("\n") + "\n", encoding="ascii")


if __name__ == "__main__":
    main()
