"""A labelled set for coherence: (request, answer, label) pairs, 108 in all.

The rule each label follows: **pass** when the answer addresses what was asked, right or
wrong ("The capital of France is Berlin." answers the question; correctness is
``answer_correctness``'s to judge), **fail** when it does not: another request's answer, a
same-topic text that answers nothing, an echo of the question, an error or a refusal.

The 32 triples of ``coherence_triples`` give 64 pairs (each correct answer passes, each
off-topic answer fails); ``HARD`` adds 44 written by hand for what a cosine of two
embeddings finds hard: terse and paraphrased answers, wrong answers, same-topic non-answers,
echoes, errors and refusals.
"""

from __future__ import annotations

from coherence_triples import TRIPLES

PASS, FAIL = True, False

TERSE: list[tuple[str, str, bool]] = [
    ("What is 2+3?", "The sum of two and three is five.", PASS),
    ("What is 2+3?", "5", PASS),
    ("Is the museum open on Mondays?", "No, it is closed on Mondays.", PASS),
    ("How many days are in a leap year?", "366.", PASS),
    ("Who wrote Pride and Prejudice?", "Jane Austen.", PASS),
    ("Can I bring my dog on the train?", "Yes, small pets travel free in a carrier.", PASS),
    ("What's the boiling point of water?", "100 °C at sea level.", PASS),
    ("Translate 'thank you' into Spanish.", "Gracias.", PASS),
    ("Convert 10 miles to kilometres.", "That's about 16.1 km.", PASS),
    ("When is my dentist appointment?", "Tuesday at 3 pm with Dr. Lee.", PASS),
    ("Do you ship to Canada?", "We do; delivery takes 5 to 7 business days.", PASS),
    ("What's a good name for a golden retriever puppy?", "How about Sunny or Maple?", PASS),
    ("Should I take an umbrella today?", "Yes, showers are expected this afternoon.", PASS),
    (
        "How do I undo my last git commit?",
        "Run git reset --soft HEAD~1 to keep the changes staged.",
        PASS,
    ),
]
"""Terse or paraphrased answers that share few words with the request."""

WRONG: list[tuple[str, str, bool]] = [
    ("What is the capital of France?", "The capital of France is Berlin.", PASS),
    ("What is 7 times 8?", "7 times 8 is 54.", PASS),
    ("When did the Berlin Wall fall?", "The Berlin Wall fell in 1991.", PASS),
    ("How many legs does a spider have?", "Spiders have six legs.", PASS),
    ("What's the weather in Oslo?", "It's 30 °C and sunny in Oslo.", PASS),
    ("Which planet is closest to the sun?", "Venus is the closest planet to the sun.", PASS),
]
"""Wrong, but answers the question."""

SAME_TOPIC: list[tuple[str, str, bool]] = [
    (
        "What time does the pharmacy close tonight?",
        "Our pharmacy carries a wide range of vitamins and supplements.",
        FAIL,
    ),
    (
        "How much does the premium plan cost per month?",
        "The premium plan is our most popular plan among teams.",
        FAIL,
    ),
    ("Where is my order 8812?", "Orders are packed in recyclable boxes.", FAIL),
    ("How do I cancel my subscription?", "Subscriptions give you access to every feature.", FAIL),
    (
        "What's the wifi password at the hotel?",
        "The hotel was built in 1920 and renovated in 2015.",
        FAIL,
    ),
    ("Is flight BA117 on time?", "British Airways flies to over 180 destinations.", FAIL),
    ("What's the refund deadline for shoes?", "We sell running, hiking and casual shoes.", FAIL),
    (
        "Which Python version does the project need?",
        "Python is a popular programming language created by Guido van Rossum.",
        FAIL,
    ),
    (
        "How long should I boil an egg for a soft yolk?",
        "Eggs are a good source of protein.",
        FAIL,
    ),
    (
        "What's the score of the match?",
        "Football is played by two teams of eleven players.",
        FAIL,
    ),
]
"""On the request's topic, but no answer to it."""

OFF_TOPIC: list[tuple[str, str, bool]] = [
    ("Book me a table for two tonight.", "Your package will arrive on Thursday.", FAIL),
    ("What is 2+3?", "Paris is the capital of France.", FAIL),
    ("Summarise this article about climate policy.", "Your password has been reset.", FAIL),
    ("How do I reset my router?", "The recipe needs two cups of flour.", FAIL),
    ("Find me a cheap flight to Rome.", "The meeting has been moved to 4 pm.", FAIL),
    ("What's my account balance?", "Tomorrow will be sunny with light winds.", FAIL),
]
"""Fluent, helpful-sounding, and about something else."""

ECHOES: list[tuple[str, str, bool]] = [
    ("What is the weather in Paris today?", "What is the weather in Paris today?", FAIL),
    ("Where is my order 4521?", "You asked where your order 4521 is.", FAIL),
    (
        "How do I reset my password?",
        "Resetting your password is something you want to do.",
        FAIL,
    ),
    ("Can I get a refund?", "You are asking about a refund.", FAIL),
]
"""The question echoed back."""

ERRORS: list[tuple[str, str, bool]] = [
    ("What's the weather in Paris?", "Error: tool get_weather timed out.", FAIL),
    ("Where is my order 4521?", "I'm sorry, something went wrong.", FAIL),
    ("Book a hotel in Rome.", "null", FAIL),
    ("Translate 'good morning' into French.", "I cannot do that.", FAIL),
]
"""An error or a refusal where the answer should be."""

HARD = TERSE + WRONG + SAME_TOPIC + OFF_TOPIC + ECHOES + ERRORS

LABELLED: list[tuple[str, str, bool]] = [
    pair
    for request, correct, off_topic in TRIPLES
    for pair in ((request, correct, PASS), (request, off_topic, FAIL))
] + HARD
