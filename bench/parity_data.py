"""Deterministic generated rows for bench/parity.py: the parity cases' data and the throughput rows.

Both sides must evaluate exactly the same rows and a rerun must reproduce them, so every
generator takes a fixed seed. The rows are built to hit the edge cases where two metric
implementations can disagree (unicode, punctuation, empty outputs and answers, numbers in
varied formats, malformed tool calls, odd judge replies), while staying clear of the
deliberate differences documented in bench/PARITY.md.
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

QA_POOL: list[tuple[str, str]] = [
    ("What is the capital of France?", "Paris"),
    ("Who wrote 'Pride and Prejudice'?", "Jane Austen"),
    ("What is the boiling point of water at sea level in Celsius?", "100 degrees"),
    ("What is the value of pi to two decimal places?", "3.14"),
    ("What is the freezing point of water in Fahrenheit?", "32 °F"),
    ("At what temperature are Celsius and Fahrenheit equal?", "-40"),
    ("What is the largest city in Brazil?", "São Paulo"),
    ("What is the capital of Japan?", "東京 (Tokyo)"),
    ("Which Swiss city hosts FIFA's headquarters?", "Zürich"),
    ("What is the chemical formula of water?", "H₂O"),
    ("Which equation relates mass and energy?", "E = mc²"),
    ("Who painted the Mona Lisa?", "Leonardo da Vinci"),
    ("What is the square root of 2, rounded to 3 decimals?", "1.414"),
    ("What was the U.S. population in 1900, in millions?", "76.2 million"),
    ("What is the change in temperature from 5 °C to -3 °C?", "-8 °C"),
    ("Name the author of 'L'Étranger'.", "Albert Camus"),
    ("What is the smallest prime number?", "2"),
    ("Which planet is known as the Red Planet?", "Mars"),
    ("Who developed the theory of general relativity?", "Albert Einstein"),
    ("What's the Spanish for 'thank you'?", "¡Gracias!"),
    ("Which band sang \"Don't Stop Believin'\"?", "Journey"),
    ("What is the longest river in Africa?", "The Nile"),
    ("Revenue is $1,250.75 and costs are $1,300.25: what is the net profit?", "-$49.50"),
    ("How many bytes are in a kibibyte?", "1,024"),
    ("Translate 'naïve café' into plain ASCII.", "naive cafe"),
    ("Which element has atomic number 79?", "Gold (Au)"),
    ("Which Greek letter denotes the golden ratio?", "φ (phi)"),
    ("Who was the first person to walk on the Moon?", "Neil Armstrong"),
    ("When did the Berlin Wall fall?", "9 November 1989"),
    ("What is 7 × 8?", "56"),
    ("What is the pH of pure water at 25 °C?", "7.0"),
    ("What is the German word for 'street'?", "Straße"),
    ("Who composed 'The Four Seasons'?", "Antonio Vivaldi"),
    ("What is the speed of light in km/s, approximately?", "299,792 km/s"),
    ("Which ocean is the largest?", "the Pacific Ocean"),
    ("What is the currency of the United Kingdom?", "pound sterling (£)"),
    ("Name Tolstoy's best-known novel in Russian.", "Война и мир (War and Peace)"),
    ("What is the Arabic word for 'peace'?", "سلام"),
    ("Which emoji usually means approval?", "👍"),
    ("What is the length of an empty string?", "0"),
    ("What is the answer when nothing is expected?", ""),
    ("What is -2.5 + +1.25?", "-1.25"),
]
UNSURE = ["I don't know.", "Not sure — maybe later?", "N/A", "…"]
VERBOSE = ["I believe the answer is {a}.", "Answer: {a}", "It's {a}, as far as I know!", "{a} (source: Wikipedia)"]


def _output_variant(rng: random.Random, answer: str, others: list[str], allow_empty: bool) -> str:
    """A realistic model output for ``answer``: right, near-miss, verbose, partial or wrong."""
    roll = rng.random()
    if roll < 0.28:
        return answer
    if roll < 0.40:
        return rng.choice([answer.lower() + ".", "The " + answer + "!", answer.upper(), f'"{answer}"'])
    if roll < 0.55:
        return rng.choice(VERBOSE).format(a=answer)
    if roll < 0.65:
        words = answer.split()
        return " ".join(words[:-1]) if len(words) > 1 else answer + " " + rng.choice(["perhaps", "?", "-ish"])
    if roll < 0.80:
        return rng.choice(others)
    if roll < 0.86:
        return rng.choice([f"«{answer}»", answer + "…", f"  {answer}\n", f"{answer} 🙂"])
    if roll < 0.93 and allow_empty:
        return ""
    return rng.choice(UNSURE)


def _keyword(rng: random.Random, answer: str) -> str:
    words = answer.split()
    roll = rng.random()
    if roll < 0.6 and words:
        return rng.choice(words)
    if roll < 0.7:
        return ""
    return rng.choice(["Paris", "°", "ß", "(", "42", "the", "ü"])


_NUMBERS = [-3.5, 2, 1024, 0.5, 100, -40, 3.14159, 7, -0.25, 1250.75, 0, 12]


def _number_pair(rng: random.Random) -> tuple[str, str]:
    """(text containing a number, the expected number as text), in varied formats."""
    value = rng.choice(_NUMBERS)
    expected = rng.choice([f"{value}", f"{value:g}", f"{float(value):.2f}", f"{value:+g}"])
    roll = rng.random()
    if roll < 0.30:
        shown = rng.choice([f"{value}", f"{float(value):.3f}", f"{value:+}", f"{value:g}"])
    elif roll < 0.45:
        shown = f"{value + rng.choice([0.004, -0.004, 0.02, -0.5, 1]):g}"
    elif roll < 0.55:
        shown = f"{value * 1000:,.0f}"  # thousands separators split the number
    elif roll < 0.62:
        shown = f"{rng.choice(['v', 'build '])}1.2.3"  # more than one dot: NaN
    elif roll < 0.68:
        shown = rng.choice(["none", "n/a", "—"])  # no number: NaN
    elif roll < 0.74:
        shown = f".{abs(int(value)) % 10}5"
    elif roll < 0.80:
        shown = f"−{abs(value)}"  # U+2212 minus is not a sign
    else:
        shown = f"{rng.choice(_NUMBERS)}"
    sentence = rng.choice(
        ["The result is {n}.", "≈ {n} units", "{n}", "Total: {n} (rounded)", "We measured {n} °C at 12:00", "= {n}!"]
    )
    return sentence.format(n=shown), expected


_TOOLS: list[tuple[str, dict[str, list[Any]]]] = [
    ("get_weather", {"city": ["Paris", "São Paulo", "東京"], "unit": ["celsius", "fahrenheit"]}),
    ("search_flights", {"origin": ["CDG", "JFK"], "destination": ["NRT", "GRU"], "date": ["2024-07-01"]}),
    ("convert_currency", {"amount": [-12.5, 100, 0.99], "from": ["EUR", "USD"], "to": ["JPY", "GBP"]}),
    ("send_email", {"to": ["ana@example.com"], "subject": ["Réunion ✔", "Q3 numbers: +4.5%"]}),
    ("get_stock_price", {"ticker": ["NVDA", "AAPL"]}),
]


def _call(rng: random.Random) -> dict[str, Any]:
    name, params = rng.choice(_TOOLS)
    args = {key: rng.choice(values) for key, values in params.items() if rng.random() < 0.9}
    return {"function": {"name": name, "arguments": args}}


def _tool_row(rng: random.Random) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """(ground-truth calls, an OpenAI chat response whose tool calls are the prediction)."""
    truth = [] if rng.random() < 0.08 else [_call(rng) for _ in range(1 if rng.random() < 0.75 else 2)]
    predicted: list[dict[str, Any]] | None = [
        {"function": {"name": c["function"]["name"], "arguments": dict(c["function"]["arguments"])}} for c in truth
    ]
    roll = rng.random()
    arguments_as: str = "json"
    if roll < 0.40:
        pass  # exactly right
    elif roll < 0.50 and predicted:
        predicted[0]["function"]["name"] = rng.choice(_TOOLS)[0]  # maybe a wrong name
    elif roll < 0.62 and predicted:
        args = predicted[0]["function"]["arguments"]
        if args:
            key = rng.choice(sorted(args))
            args[key] = str(args[key]) if rng.random() < 0.5 else "other"  # 100 vs "100", or wrong
    elif roll < 0.68:
        arguments_as = "malformed"
        if predicted and rng.random() < 0.4:
            predicted[0]["function"]["name"] = "lookup_" + predicted[0]["function"]["name"]  # and a wrong name
    elif roll < 0.74:
        predicted = None  # the model answered in text, no tool_calls key
    elif roll < 0.80:
        predicted = list(reversed(predicted or [])) + ([_call(rng)] if rng.random() < 0.5 else [])
    elif roll < 0.85 and predicted:
        arguments_as = "null"
    elif roll < 0.90 and predicted:
        predicted = predicted + [predicted[0]]  # a duplicate call
    message: dict[str, Any] = {"role": "assistant", "content": None}
    if predicted is None:
        message["content"] = "I cannot call tools right now."
    else:
        calls = []
        for index, call in enumerate(predicted):
            args = call["function"]["arguments"]
            if arguments_as == "malformed" and index == 0:
                text: str | None = json.dumps(args, ensure_ascii=False)[:-1] + ","  # truncated JSON
            elif arguments_as == "null" and index == 0 and not args:
                text = None
            else:
                keys = list(args)
                rng.shuffle(keys)
                text = json.dumps({k: args[k] for k in keys}, ensure_ascii=rng.random() < 0.5)
            calls.append(
                {
                    "id": f"call_{index}",
                    "type": "function",
                    "function": {"name": call["function"]["name"], "arguments": text},
                }
            )
        message["tool_calls"] = calls
    response = {"id": "chatcmpl-x", "object": "chat.completion", "choices": [{"index": 0, "message": message}]}
    return truth, response


def offline_rows(n: int, seed: int = 20240611) -> list[dict[str, Any]]:
    rng = random.Random(seed)
    answers = [a for _, a in QA_POOL]
    rows = []
    for i in range(n):
        question, answer = QA_POOL[i % len(QA_POOL)] if i < len(QA_POOL) else rng.choice(QA_POOL)
        output = _output_variant(rng, answer, answers, allow_empty=True)
        number_text, number_expected = _number_pair(rng)
        truth, response = _tool_row(rng)
        rows.append(
            {
                "id": f"r{i:05d}",
                "question": question,
                "answer": answer,
                "output": output,
                "keyword": _keyword(rng, answer),
                "prefix": answer[: rng.choice([0, 1, 3, 5])],
                "suffix": answer[-rng.choice([1, 2, 4]) :] if answer and rng.random() < 0.7 else rng.choice(["!", "."]),
                "number_text": number_text,
                "number_expected": number_expected,
                "tool_calls": truth,
                "response": response,
            }
        )
    return rows


RUBRIC = [
    {"label": "poor", "value": 0, "description": "wrong or off-topic"},
    {"label": "fair", "value": 1, "description": "partly right"},
    {"label": "good", "value": 2, "description": "right but verbose"},
    {"label": "excellent", "value": 3, "description": "right and concise"},
]


def _judge_reply(rng: random.Random) -> str:
    """A plain-JSON judge answer (no fences, no prose, no out-of-range numbers)."""
    label = rng.choice(RUBRIC)["label"]
    accuracy: Any = rng.choice([1, 2, 3, 4, 5])
    roll = rng.random()
    extra: dict[str, Any] = {}
    if roll < 0.08:
        accuracy = rng.choice([1.5, 2.25, 3.5, 4.75])
    elif roll < 0.14:
        label = rng.choice(["great", "Good", "meh"])  # not a rubric label: NaN, label ""
    elif roll < 0.18:
        accuracy = None
    elif roll < 0.21:
        accuracy = "4"  # a string is not a number: NaN on both sides
    elif roll < 0.23:
        accuracy = True  # a boolean counts as 1.0
    elif roll < 0.33:
        extra = {"explanation": rng.choice(["Correct — «exact».", 'Says "maybe"; partial.', "数字は正しい"])}
    obj: dict[str, Any] = {"quality": label, "accuracy": accuracy, **extra}
    if roll >= 0.33 and roll < 0.36:
        del obj["accuracy"]
    text = json.dumps(obj, ensure_ascii=rng.random() < 0.5)
    if rng.random() < 0.1:
        text = f"\n  {text}\n"
    return text


def online_rows(n: int, seed: int = 77) -> tuple[list[dict[str, Any]], list[dict[str, str]]]:
    """Rows plus the test server's rules: one scripted model answer and one judge answer per row."""
    rng = random.Random(seed)
    answers = [a for _, a in QA_POOL if a]
    rows, rules = [], []
    for i in range(n):
        question, answer = rng.choice([qa for qa in QA_POOL if qa[1]])
        row_id = f"q{i:05d}"
        rows.append({"id": row_id, "question": question, "answer": answer})
        rules.append({"match": f"[[{row_id}]]", "reply": _output_variant(rng, answer, answers, allow_empty=False)})
        rules.append({"match": f"<<{row_id}>>", "reply": _judge_reply(rng)})
    return rows, rules


def write_jsonl(path: Path, rows: list[dict[str, Any]]) -> Path:
    with open(path, "w", encoding="utf-8") as handle:
        for row in rows:
            handle.write(json.dumps(row, ensure_ascii=False) + "\n")
    return path


def throughput_rows(n: int, seed: int = 5) -> list[dict[str, Any]]:
    """Rows with the output already in them (non-empty answers only), for offline and online exact-match."""
    rng = random.Random(seed)
    pool = [qa for qa in QA_POOL if qa[1]]
    answers = [a for _, a in pool]
    rows = []
    for i in range(n):
        question, answer = pool[rng.randrange(len(pool))]
        output = _output_variant(rng, answer, answers, allow_empty=False)
        rows.append({"id": f"t{i:07d}", "question": question, "answer": answer, "output": output})
    return rows
