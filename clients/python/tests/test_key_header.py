"""The Idempotency-Key header against test/vectors/idempotency_key.json, which every client's
tests check: the draft's sf-string and the unquoted token, one key for both spellings."""
import json
import pathlib

import pytest

from pg_idempotency.errors import KeyMalformed
from pg_idempotency.web import parse_idempotency_key

VECTORS = json.loads((pathlib.Path(__file__).resolve().parents[3] / "test" / "vectors" /
                      "idempotency_key.json").read_text(encoding="utf-8"))["keys"]


def test_there_are_vectors():
    assert len(VECTORS) >= 10


@pytest.mark.parametrize("case", VECTORS, ids=[c["name"] for c in VECTORS])
def test_key_header(case):
    if "error" in case:
        with pytest.raises(KeyMalformed) as e:
            parse_idempotency_key(case["header"])
        assert e.value.code == case["error"]
    else:
        assert parse_idempotency_key(case["header"]) == case["key"]
