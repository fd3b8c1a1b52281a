#!/usr/bin/env python3
"""Writes an N-row CSV dataset with realistic columns, for benchmarking the data stages.

  python benchmarks/make_dataset.py N OUT.csv [--seed S] [--users U]

Rows are generated and written one batch at a time, so memory stays constant whatever N
is (a 1M-row file is about 110 MB and takes ~15 s). The same N and seed always give the
same file, byte for byte.

Columns (the empty field is a missing value):
  user_id        high-cardinality string id ("u" + 10 hex digits) of one of U users
                 (default N/2; rows pick users at random, so ~0.43 N distinct ids): its
                 vocabulary grows with N unless --users fixes U.
  age            float, ~4% missing
  income         float, log-normal, ~12% missing
  tenure_days    int, 0..3650, never missing
  num_purchases  int, heavy-tailed, ~2% missing
  rating         float 1.0..5.0, ~20% missing
  country        string, 25 values with a skewed (Zipf) frequency, ~1% missing
  device         string, 4 values
  plan           string, 5 values, never missing
  signup_date    string YYYY-MM-DD, ~3650 values
  comment        free text, empty in ~40% of rows; words from a small vocabulary,
                 sometimes with commas, double quotes or apostrophes (so the CSV writer
                 has to quote it); never contains a newline
  label          int 0/1 (~37% ones), depends on several columns plus noise
"""

from __future__ import annotations

import argparse
import csv
import datetime
import math
import os
import random

HEADER = [
    "user_id",
    "age",
    "income",
    "tenure_days",
    "num_purchases",
    "rating",
    "country",
    "device",
    "plan",
    "signup_date",
    "comment",
    "label",
]

COUNTRIES = [
    "US",
    "IN",
    "BR",
    "DE",
    "GB",
    "FR",
    "JP",
    "CA",
    "MX",
    "ES",
    "IT",
    "AU",
    "NL",
    "PL",
    "TR",
    "KR",
    "SE",
    "AR",
    "ZA",
    "NG",
    "EG",
    "ID",
    "PH",
    "VN",
    "CO",
]
_ZIPF = [1.0 / (k + 1) for k in range(len(COUNTRIES))]
DEVICES = ["android", "ios", "web", "tablet"]
PLANS = ["free", "basic", "plus", "pro", "enterprise"]
WORDS = (
    "the app is great fast slow crashes sometimes love it hate support billing was "
    "confusing easy to use would recommend not worth price ok fine works well on my "
    "phone after update login issue refund please thanks good bad very really nice "
    "interface dark mode sync broken again customer service helpful quick"
).split()
EPOCH = datetime.date(2015, 1, 1)
# An odd multiplier modulo 2**40 is a bijection: ids look random, never collide, and no
# set of seen ids has to be kept.
_ID_MULT = 0x9E3779B97F4A7C15 % (1 << 40) | 1


def _comment(rnd: random.Random) -> str:
    if rnd.random() < 0.4:
        return ""
    words = [rnd.choice(WORDS) for _ in range(rnd.randint(2, 14))]
    text = " ".join(words)
    r = rnd.random()
    if r < 0.25:  # a comma inside the field
        cut = rnd.randint(1, len(words) - 1)
        text = " ".join(words[:cut]) + ", " + " ".join(words[cut:])
    elif r < 0.33:  # a quoted phrase: the CSV writer doubles the quotes
        text = f'"{words[0]}" {" ".join(words[1:])}, she said'
    elif r < 0.38:
        text = text.replace(" it", " it's", 1)
    return text[0].upper() + text[1:]


def _row(rnd: random.Random, n_users: int) -> list:
    uid = (rnd.randrange(n_users) * _ID_MULT) % (1 << 40)
    age = rnd.gauss(38, 12)
    age = min(max(age, 16.0), 90.0)
    income = math.exp(rnd.gauss(10.6, 0.6))
    tenure = rnd.randint(0, 3650)
    purchases = int(rnd.paretovariate(1.5)) - 1 + (tenure // 400)
    rating = round(min(5.0, max(1.0, rnd.gauss(3.8, 0.9))), 1)
    country = rnd.choices(COUNTRIES, _ZIPF)[0]
    device = rnd.choices(DEVICES, (45, 35, 15, 5))[0]
    plan = rnd.choices(PLANS, (50, 25, 12, 9, 4))[0]
    signup = EPOCH + datetime.timedelta(days=rnd.randrange(3650))
    comment = _comment(rnd)
    z = (
        -1.4
        + 0.6 * PLANS.index(plan) / 2
        + 0.25 * math.log1p(purchases)
        - 0.015 * (age - 38)
        + 0.4 * (rating - 3.8)
        + (0.3 if device == "ios" else 0.0)
        + rnd.gauss(0, 0.8)
    )
    label = 1 if rnd.random() < 1 / (1 + math.exp(-z)) else 0
    return [
        f"u{uid:010x}",
        "" if rnd.random() < 0.04 else f"{age:.1f}",
        "" if rnd.random() < 0.12 else f"{income:.2f}",
        tenure,
        "" if rnd.random() < 0.02 else purchases,
        "" if rnd.random() < 0.20 else f"{rating:.1f}",
        "" if rnd.random() < 0.01 else country,
        device,
        plan,
        signup.isoformat(),
        comment,
        label,
    ]


def write_dataset(
    n: int, out: str, seed: int = 0, users: int | None = None, batch: int = 10_000
) -> None:
    rnd = random.Random(seed)
    n_users = max(1, users or n // 2)
    tmp = out + ".tmp"
    with open(tmp, "w", newline="") as f:
        w = csv.writer(f, lineterminator="\n")
        w.writerow(HEADER)
        done = 0
        while done < n:
            k = min(batch, n - done)
            w.writerows(_row(rnd, n_users) for _ in range(k))
            done += k
    os.replace(tmp, out)


def main() -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("rows", type=int)
    ap.add_argument("out")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument(
        "--users", type=int, default=None, help="distinct users to draw ids from (default N/2)"
    )
    a = ap.parse_args()
    d = os.path.dirname(os.path.abspath(a.out))
    os.makedirs(d, exist_ok=True)
    write_dataset(a.rows, a.out, a.seed, a.users)
    print(a.out)


if __name__ == "__main__":
    main()
