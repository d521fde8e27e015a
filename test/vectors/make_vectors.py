#!/usr/bin/env python3
"""Writes test/vectors/fingerprint.jsonl, the shared fingerprint test vectors.

    python3 test/vectors/make_vectors.py > test/vectors/fingerprint.jsonl

Each vector's canonical form below is written by hand from docs/fingerprint.md, not computed
by any implementation; this script only adds its SHA-256. The SQL test (sql/fingerprint_vectors.sql)
and both clients check themselves against the .jsonl file; the Python tests check that the file
is what this script writes.

A line is one JSON object:
  name       unique, for messages
  json       the JSON text, exactly (white space included)
  exclude    the exclude list
  canonical  the canonical form (UTF-8 text)             } a success vector
  sha256     SHA-256 of the canonical form, 64 hex digits }
  error      the SQLSTATE of SQL fingerprint(json::jsonb, exclude), for an error vector:
             22P02 not JSON, 22P05 \\u0000, 54000 a limit, 22023 a bad exclude path
"""
import hashlib
import json
import sys

OK = []   # (name, json text, exclude, canonical)
ERR = []  # (name, json text, exclude, sqlstate)


def ok(name, text, canonical, exclude=()):
    OK.append((name, text, list(exclude), canonical))


def err(name, text, sqlstate, exclude=()):
    ERR.append((name, text, list(exclude), sqlstate))


# ---- numbers: exact decimal value, plain notation, no trailing zeros, no -0 ----
ok("number/int", "1", "1")
ok("number/one-point-zero", "1.0", "1")
ok("number/1e2", "1e2", "100")
ok("number/1E+2", "1E+2", "100")
ok("number/1e0", "1e0", "1")
ok("number/1.23e-7", "1.23e-7", "0.000000123")
ok("number/minus-zero", "-0", "0")
ok("number/minus-zero-fraction", "-0.0e-3", "0")
ok("number/zero-fraction", "0.000", "0")
ok("number/zero-exponent", "0e5", "0")
ok("number/trailing-zeros", "1.10", "1.1")
ok("number/trailing-zeros-integer", "100", "100")
ok("number/ten-point-zero", "10.0", "10")
ok("number/half", "0.50", "0.5")
ok("number/1.5E3", "1.5E3", "1500")
ok("number/negative-scaled", "-12.3400e1", "-123.4")
ok("number/123e-2", "123e-2", "1.23")
ok("number/123e-5", "123e-5", "0.00123")
ok("number/1000e-3", "1000e-3", "1")
ok("number/negative-small-scaled-up", "-0.000001e6", "-1")
ok("number/negative-fraction", "-1.5e-3", "-0.0015")
ok("number/1e21-not-exponent-form", "1e21", "1" + "0" * 21)
ok("number/2^53+1-exact", "9007199254740993", "9007199254740993")
ok("number/0.1-exact", "0.1", "0.1")
ok("number/binary64-would-round", "0.30000000000000000000000000000001",
   "0.30000000000000000000000000000001")
ok("number/long-exact", "12345678901234567890123456789.000000000000000000001000",
   "12345678901234567890123456789.000000000000000000001")
ok("number/5e-324", "5e-324", "0." + "0" * 323 + "5")
ok("number/huge-exponent-1000-digits", "1e999", "1" + "0" * 999)
ok("number/tiny-exponent-1000-digits", "1e-999", "0." + "0" * 998 + "1")
ok("number/many-trailing-zeros", "7." + "0" * 5000, "7")
ok("number/exponent-leading-zeros", "25e-0000001", "2.5")
ok("number/in-array", "[1.0, -0, 2e-1, 3E1]", "[1,0,0.2,30]")
err("number/over-1000-digits", "1e1000", "54000")
err("number/tiny-over-1000-digits", "1e-1000", "54000")
err("number/long-mantissa-over-1000-digits", "1" * 1001, "54000")
err("number/limit-checked-in-excluded-member", '{"a": 1e1000, "b": 1}', "54000", ["a"])
err("number/NaN", "NaN", "22P02")
err("number/Infinity", "Infinity", "22P02")
err("number/minus-Infinity", "-Infinity", "22P02")
err("number/leading-zero", "01", "22P02")
err("number/trailing-point", "1.", "22P02")
err("number/leading-point", ".5", "22P02")
err("number/plus-sign", "+1", "22P02")
err("number/hex", "0x10", "22P02")
err("number/empty-exponent", "1e", "22P02")

# ---- strings: UTF-8, escape only " \\ and U+0000..U+001F ----
ok("string/short-escapes", r'"\"\\\/\b\f\n\r\t"', r'"\"\\/\b\f\n\r\t"')
ok("string/control-chars", r'"\u0001\u000b\u001F"', r'"\u0001\u000b\u001f"')
ok("string/del-not-escaped", '"\\u007f"', '"\x7f"')
ok("string/escaped-non-ascii", r'"\u00E9\u20ac"', '"\u00e9\u20ac"')
ok("string/raw-non-ascii", '"\u00e9\u20ac"', '"\u00e9\u20ac"')
ok("string/escaped-astral", r'"\ud83d\ude00"', '"\U0001F600"')
ok("string/raw-astral", '"\U0001F600"', '"\U0001F600"')
ok("string/line-separators", r'"\u2028\u2029"', '"\u2028\u2029"')
ok("string/escaped-ascii", r'"\u0041\u002f\u005C"', r'"A/\\"')
ok("string/bmp-max", r'"\uffff"', '"\uffff"')
ok("string/empty", '""', '""')
err("string/unpaired-high-surrogate", r'"\ud800"', "22P02")
err("string/unpaired-low-surrogate", r'"\udc00"', "22P02")
err("string/high-surrogate-then-text", r'"\ud800x"', "22P02")
err("string/reversed-surrogates", r'"\ude00\ud83d"', "22P02")
err("string/nul-escape", r'"\u0000"', "22P05")
err("string/raw-control-char", '"a\tb"', "22P02")
err("string/bad-escape", r'"\x"', "22P02")
err("string/short-unicode-escape", r'"\u12"', "22P02")
err("string/unterminated", '"abc', "22P02")
err("string/single-quotes", "'a'", "22P02")

# ---- member order: by UTF-8 bytes (= by code points), not UTF-16, not jsonb's ----
ok("order/bytes-not-length-first", '{"b":1,"aa":2,"a":3,"":4}', '{"":4,"a":3,"aa":2,"b":1}')
ok("order/case", '{"a":1,"B":2,"_":3}', '{"B":2,"_":3,"a":1}')
ok("order/prefix", '{"ab":1,"a b":2,"a":3}', '{"a":3,"a b":2,"ab":1}')
ok("order/non-ascii-after-ascii", '{"\u00e9":1,"z":2,"e":3}', '{"e":3,"z":2,"\u00e9":1}')
ok("order/astral-after-bmp-unlike-utf16",
   '{"\\uffff":1,"\\ud83d\\ude00":2,"\\ue000":3,"z":4}',
   '{"z":4,"\ue000":3,"\uffff":1,"\U0001F600":2}')
ok("order/escaped-keys-compared-decoded", '{"\\u0062":1,"a":2}', '{"a":2,"b":1}')
ok("order/nested", '{"z":{"y":1,"x":2},"a":[{"d":1,"c":2}]}', '{"a":[{"c":2,"d":1}],"z":{"x":2,"y":1}}')
ok("order/readme-example", '{"b": [true, null, "x"], "a": 1.00}', '{"a":1,"b":[true,null,"x"]}')

# ---- duplicate members: the last one wins ----
ok("duplicate/last-wins", '{"a":1,"a":2}', '{"a":2}')
ok("duplicate/last-wins-whole-value", '{"a":{"x":1},"b":0,"a":{"y":2}}', '{"a":{"y":2},"b":0}')
ok("duplicate/escaped-spelling", '{"\\u0061":1,"a":2}', '{"a":2}')
ok("duplicate/nested", '{"o":{"k":1,"k":[2],"j":0}}', '{"o":{"j":0,"k":[2]}}')
ok("duplicate/excluded", '{"a":1,"a":2,"b":3}', '{"b":3}', ["a"])

# ---- exclude ----
ok("exclude/top-level", '{"amount":5,"sent_at":"10:00"}', '{"amount":5}', ["sent_at"])
ok("exclude/nested", '{"a":{"b":{"c":1,"d":2}},"c":3}', '{"a":{"b":{"d":2}},"c":3}', ["a.b.c"])
ok("exclude/whole-subtree", '{"a":{"b":{"c":1}},"c":3}', '{"c":3}', ["a"])
ok("exclude/parent-and-child", '{"a":{"b":1},"c":3}', '{"c":3}', ["a.b", "a"])
ok("exclude/only-top-level-for-one-segment", '{"x":{"a":1},"a":2}', '{"x":{"a":1}}', ["a"])
ok("exclude/not-into-arrays", '{"a":[{"b":1}]}', '{"a":[{"b":1}]}', ["a.b", "a.0"])
ok("exclude/not-into-scalars", '{"a":1}', '{"a":1}', ["a.b"])
ok("exclude/missing", '{"a":1}', '{"a":1}', ["x", "y.z"])
ok("exclude/empty-list", '{"a":1}', '{"a":1}', [])
ok("exclude/repeated-entry", '{"a":1,"b":2}', '{"b":2}', ["a", "a"])
ok("exclude/top-level-array-untouched", '[{"a":1}]', '[{"a":1}]', ["a"])
ok("exclude/scalar-untouched", '"a"', '"a"', ["a"])
ok("exclude/dotted-name-cannot-be-named", '{"a.b":1,"a":{"b":2}}', '{"a":{},"a.b":1}', ["a.b"])
ok("exclude/dotted-name-alone", '{"a.b":1}', '{"a.b":1}', ["a.b"])
ok("exclude/non-ascii-name", '{"\u00e9":1,"e":2}', '{"e":2}', ["\u00e9"])
ok("exclude/escaped-name", '{"a\\u0022b":1,"c":2}', '{"c":2}', ['a"b'])
ok("exclude/nested-object-emptied", '{"m":{"t":1}}', '{"m":{}}', ["m.t"])
ok("exclude/case-sensitive", '{"A":1,"a":2}', '{"A":1}', ["a"])
err("exclude/empty-entry", '{"a":1}', "22023", [""])
err("exclude/empty-segment", '{"a":1}', "22023", ["a..b"])
err("exclude/leading-dot", '{"a":1}', "22023", [".a"])
err("exclude/trailing-dot", '{"a":1}', "22023", ["a."])

# ---- arrays, literals, white space, nesting ----
ok("array/empty", "[]", "[]")
ok("array/order-kept", "[3,1,2]", "[3,1,2]")
ok("array/nested-with-space", " [ 1 , [ 2 , [ 3 ] ] , { } ] ", "[1,[2,[3]],{}]")
ok("array/literals", "[true,false,null]", "[true,false,null]")
ok("space/all-kinds", '\t\r\n {\n\t"a" :\r [ 1 ,\t2 ] } \n', '{"a":[1,2]}')
ok("scalar/null", "null", "null")
ok("scalar/string", '"x"', '"x"')
ok("object/empty", "{}", "{}")
ok("nesting/1000-levels", "[" * 1000 + "]" * 1000, "[" * 1000 + "]" * 1000)
err("nesting/1001-levels", "[" * 1001 + "]" * 1001, "54000")
err("syntax/empty", "", "22P02")
err("syntax/only-space", "  ", "22P02")
err("syntax/trailing-comma-object", '{"a":1,}', "22P02")
err("syntax/trailing-comma-array", "[1,]", "22P02")
err("syntax/two-values", "1 2", "22P02")
err("syntax/unquoted-key", "{a:1}", "22P02")
err("syntax/bad-literal", "tru", "22P02")
err("syntax/capital-literal", "True", "22P02")
err("syntax/unclosed", "[1", "22P02")
err("syntax/comment", "[1] // x", "22P02")
err("syntax/byte-order-mark", "\ufeff{}", "22P02")


def main(out=sys.stdout):
    names = set()
    for name, text, exclude, canonical in OK:
        assert name not in names, name
        names.add(name)
        digest = hashlib.sha256(canonical.encode("utf-8")).hexdigest()
        line = {"name": name, "json": text, "exclude": exclude, "canonical": canonical,
                "sha256": digest}
        out.write(json.dumps(line, ensure_ascii=True) + "\n")
    for name, text, exclude, sqlstate in ERR:
        assert name not in names, name
        names.add(name)
        line = {"name": name, "json": text, "exclude": exclude, "error": sqlstate}
        out.write(json.dumps(line, ensure_ascii=True) + "\n")


if __name__ == "__main__":
    main()
