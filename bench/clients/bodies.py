#!/usr/bin/env python3
"""Writes the request bodies of bench/clients.sh: order-like JSON texts (a customer, line items
with nested attributes, decimal prices, shipping, payment, metadata), compact, deterministic
(no randomness: every value is a function of its index), grown item by item to just over a
target size. Both client scripts read these files, so they fingerprint the same bytes.

    bodies.py DIR      writes DIR/body-1k.json (>= 1024 bytes) and DIR/body-100k.json (>= 102400)
"""
import json
import os
import sys

COLORS = ["black", "white", "red", "blue", "green", "grey"]
SIZES = ["XS", "S", "M", "L", "XL"]
WORDS = ["classic", "organic", "cotton", "recycled", "premium", "slim", "travel", "daily"]


def item(i):
    cents = 499 + (i * 7919) % 15000
    return {
        "line": i + 1,
        "sku": f"SKU-{10000 + i * 37 % 90000:05d}",
        "name": f"{WORDS[i % len(WORDS)].title()} {WORDS[(i * 3 + 1) % len(WORDS)]} item {i}",
        "quantity": 1 + i % 4,
        "unit_price": cents / 100,
        "discount": [0, 0.05, 0.1, 0.15][i % 4],
        "attributes": {"color": COLORS[i % len(COLORS)], "size": SIZES[i % len(SIZES)],
                       "gift_wrap": i % 5 == 0},
        "tags": [WORDS[(i + k) % len(WORDS)] for k in range(i % 3 + 1)],
    }


def order(n_items):
    items = [item(i) for i in range(n_items)]
    total = sum(round(it["unit_price"] * 100) * it["quantity"] for it in items)
    return {
        "order_ref": "ORD-2026-004217",
        "customer": {"id": "cus_8f14e45f", "email": "jane.doe@example.com", "name": "Jane Doe",
                     "address": {"line1": "12 Harbour Street", "city": "Bristol",
                                 "postal_code": "BS1 4RN", "country": "GB"}},
        "currency": "EUR",
        "items": items,
        "shipping": {"method": "standard", "price": 4.95, "eta_days": 3},
        "payment": {"method": "card", "token": "tok_3f2a9c0b7d", "three_d_secure": True},
        "total": total / 100,
        "metadata": {"channel": "web", "locale": "en-GB",
                     "client_sent_at": "2026-11-23T10:15:30.123Z"},
    }


def body(target):
    """The smallest order of this shape whose compact JSON text is at least target bytes."""
    n = 1
    while True:
        text = json.dumps(order(n), separators=(",", ":"))
        if len(text.encode()) >= target:
            return text
        n += 1 if len(text) * 2 > target else max(1, n // 2)


def main():
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    for name, target in (("1k", 1024), ("100k", 100 * 1024)):
        with open(os.path.join(out, f"body-{name}.json"), "w") as f:
            f.write(body(target))


if __name__ == "__main__":
    main()
