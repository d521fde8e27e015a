"""Statements with bound values on a psycopg2 connection (Django's backend before 4.2):
psycopg2 has no bound parameters (it writes every value into the statement text), so the
Django session sends its statements through libpq itself on psycopg2's own connection
(PQexecParams on connection.pgconn_ptr): the same connection, the same transaction, every value
in a Bind message. psycopg2 keeps its transaction control (its BEGIN, COMMIT and ROLLBACK); the
rows come back through psycopg2's own typecasters, as its cursor would have read them."""
from __future__ import annotations

import ctypes
import ctypes.util
import functools
import json
import re

_OK = (1, 2)                      # PGRES_COMMAND_OK, PGRES_TUPLES_OK
_CONNECTION_BAD = 1
_DIAG = {"pgcode": ord("C"), "message": ord("M"), "detail": ord("D"), "hint": ord("H")}


@functools.lru_cache(maxsize=None)
def _libpq():
    """The libpq psycopg2 is linked with (one library in the process: the same object)."""
    lib = ctypes.CDLL(ctypes.util.find_library("pq") or "libpq.so.5")
    p, i = ctypes.c_void_p, ctypes.c_int
    for name, restype, argtypes in (
            ("PQexecParams", p, [p, ctypes.c_char_p, i, p, ctypes.POINTER(ctypes.c_char_p), p, p, i]),
            ("PQresultStatus", i, [p]), ("PQntuples", i, [p]), ("PQnfields", i, [p]),
            ("PQgetisnull", i, [p, i, i]), ("PQgetvalue", p, [p, i, i]),
            ("PQgetlength", i, [p, i, i]), ("PQftype", ctypes.c_uint, [p, i]),
            ("PQresultErrorField", ctypes.c_char_p, [p, i]), ("PQerrorMessage", ctypes.c_char_p, [p]),
            ("PQstatus", i, [p]), ("PQclear", None, [p])):
        fn = getattr(lib, name)
        fn.restype, fn.argtypes = restype, argtypes
    return lib


@functools.lru_cache(maxsize=None)
def _error_class(pgcode):
    """The psycopg2 error class psycopg2 would raise for pgcode (OperationalError for None: a
    connection that broke), made to carry pgcode and pgerror as the server's errors do."""
    import psycopg2
    import psycopg2.errors
    try:
        base = psycopg2.errors.lookup(pgcode) if pgcode else psycopg2.OperationalError
    except KeyError:
        base = psycopg2.DatabaseError         # a SQLSTATE psycopg2 does not know (IK001, ...)
    return type(base.__name__, (base,), {"pgcode": None, "pgerror": None, "detail": None,
                                         "hint": None, "__module__": __name__})


def server_error(pgcode, message, detail=None, hint=None):
    err = _error_class(pgcode)(message)
    err.pgcode, err.pgerror, err.detail, err.hint = pgcode, message, detail, hint
    return err


def _text(value) -> bytes | None:
    """A value in the text format of its parameter: a str, an int, bytes (bytea, as hex), a
    list of str (text[]), a dict or list of a jsonb parameter given as its JSON text already."""
    if value is None:
        return None
    if isinstance(value, bool):
        return b"true" if value else b"false"
    if isinstance(value, (bytes, bytearray, memoryview)):
        return b"\\x" + bytes(value).hex().encode("ascii")
    if isinstance(value, (list, tuple)):      # text[]: an array literal, each element quoted
        items = ("NULL" if v is None else
                 '"' + str(v).replace("\\", "\\\\").replace('"', '\\"') + '"' for v in value)
        return ("{" + ",".join(items) + "}").encode("utf-8")
    if isinstance(value, dict):
        return json.dumps(value).encode("utf-8")
    return str(value).encode("utf-8")


def numbered(sql: str) -> str:
    """psycopg's %s placeholders as $1, $2, ... (the spec's texts hold no other %)."""
    n = iter(range(1, 10_000))
    return re.sub(r"%s", lambda m: f"${next(n)}", sql)


def execute_row(raw, sql: str, params):
    """Runs sql (%s placeholders) with params bound, on the psycopg2 connection raw, and returns
    its first row (None for none). A server error raises psycopg2's error of its SQLSTATE
    (pgcode None: the connection broke), which Django's wrap_database_errors wraps."""
    lib = _libpq()
    conn = ctypes.c_void_p(raw.pgconn_ptr)
    values = [_text(v) for v in params]
    array = (ctypes.c_char_p * max(1, len(values)))(*values)
    res = lib.PQexecParams(conn, numbered(sql).encode("utf-8"), len(values), None, array,
                           None, None, 0)
    if not res:
        raise server_error(None, (lib.PQerrorMessage(conn) or b"").decode("utf-8", "replace"))
    try:
        if lib.PQresultStatus(res) not in _OK:
            fields = {name: lib.PQresultErrorField(res, code) for name, code in _DIAG.items()}
            fields = {k: v.decode("utf-8", "replace") if v else None for k, v in fields.items()}
            if lib.PQstatus(conn) == _CONNECTION_BAD:
                fields["pgcode"] = None
            raise server_error(fields["pgcode"], fields["message"] or
                              (lib.PQerrorMessage(conn) or b"").decode("utf-8", "replace"),
                              fields["detail"], fields["hint"])
        if lib.PQntuples(res) == 0:
            return None
        cursor = raw.cursor()
        row = []
        for col in range(lib.PQnfields(res)):
            if lib.PQgetisnull(res, 0, col):
                row.append(None)
                continue
            text = ctypes.string_at(lib.PQgetvalue(res, 0, col),
                                    lib.PQgetlength(res, 0, col)).decode("utf-8")
            caster = _caster(raw, lib.PQftype(res, col))
            row.append(caster(text, cursor) if caster is not None else text)
        return tuple(row)
    finally:
        lib.PQclear(res)


def _caster(raw, oid):
    """psycopg2's typecaster of the type oid: the connection's own (Django registers some),
    else the global one."""
    import psycopg2.extensions
    return raw.string_types.get(oid) or psycopg2.extensions.string_types.get(oid)
