#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""The independent oracle for tests/test_grammar_walks.c: every output of a constrained random
walk, checked by code that shares nothing with daemon/grammar/.

Input (stdin): JSON lines {"kind": "json" | "json_object" | "schema", "schema": ..., "output":
"..."}. A JSON output must parse with json.loads (an object for json_object); a schema output
must parse and validate under python3-jsonschema (Draft 2020-12, its FormatChecker), twice: with
floats (how most validators compare numbers) and with exact decimals for both the schema and
the output (JSON Schema's mathematical values). Formats that jsonschema cannot check without
optional packages are checked here from their RFCs (date-time, time, duration, hostname, and a
stricter email).

Prints one line per failure and a summary; exit 0 when every output is valid, 1 otherwise, 77
when jsonschema is missing.
"""
import datetime
import decimal
import ipaddress
import json
import re
import sys
import uuid

try:
    import jsonschema
except ImportError:
    print("SKIP: python3-jsonschema is not installed (tools/install-deps.sh installs it)")
    sys.exit(77)

# RFC 3339 section 5.6 and Appendix A.
DATE = r"\d{4}-\d{2}-\d{2}"
PARTIAL_TIME = r"(\d{2}):(\d{2}):(\d{2})(\.\d+)?"
OFFSET = r"(Z|z|[+-](\d{2}):(\d{2}))"
DUR_SECOND = r"\d+S"
DUR_MINUTE = r"\d+M(" + DUR_SECOND + r")?"
DUR_HOUR = r"\d+H(" + DUR_MINUTE + r")?"
DUR_TIME = r"T(" + DUR_HOUR + "|" + DUR_MINUTE + "|" + DUR_SECOND + ")"
DUR_DAY = r"\d+D"
DUR_MONTH = r"\d+M(" + DUR_DAY + r")?"
DUR_YEAR = r"\d+Y(" + DUR_MONTH + r")?"
DUR_DATE = "(" + DUR_DAY + "|" + DUR_MONTH + "|" + DUR_YEAR + ")(" + DUR_TIME + ")?"
DURATION = "P(" + DUR_DATE + "|" + DUR_TIME + r"|\d+W)"


def check_time(s):
    m = re.fullmatch(PARTIAL_TIME + OFFSET, s)
    if not m:
        return False
    h, mi, sec = int(m.group(1)), int(m.group(2)), int(m.group(3))
    if h > 23 or mi > 59 or sec > 60:
        return False
    if m.group(6) is not None and (int(m.group(6)) > 23 or int(m.group(7)) > 59):
        return False
    return True


def check_date(s):
    if not re.fullmatch(DATE, s):
        return False
    try:
        datetime.date.fromisoformat(s)
    except ValueError:
        return False
    return True


def check_hostname(s):
    # RFC 1123 section 2.1 with RFC 1034's lengths.
    if len(s) > 253:
        return False
    labels = s.split(".")
    return all(re.fullmatch(r"[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?", l) for l in labels)


def check_email(s):
    # RFC 5321 section 4.1.2 (dot-string local part) and 4.5.3.1 (lengths).
    if s.count("@") != 1:
        return False
    local, domain = s.split("@")
    atext = r"[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]+"
    return (len(local) <= 64 and len(s) <= 254 and
            re.fullmatch(atext + r"(\." + atext + r")*", local) is not None and
            check_hostname(domain))


def check_format(fmt, s):
    if fmt == "date":
        return check_date(s)
    if fmt == "time":
        return check_time(s)
    if fmt == "date-time":
        parts = re.split("[Tt]", s)
        return len(parts) == 2 and check_date(parts[0]) and check_time(parts[1])
    if fmt == "duration":
        return re.fullmatch(DURATION, s) is not None
    if fmt == "hostname":
        return check_hostname(s)
    if fmt == "email":
        return check_email(s)
    if fmt == "ipv4":
        try:
            ipaddress.IPv4Address(s)
            return True
        except ValueError:
            return False
    if fmt == "ipv6":
        try:
            ipaddress.IPv6Address(s)
            return True
        except ValueError:
            return False
    if fmt == "uuid":
        try:
            uuid.UUID(s)
        except ValueError:
            return False
        return all(s[i] == "-" for i in (8, 13, 18, 23))
    return True


def resolve(root, ref):
    """A local reference "#/a/b" (RFC 6901)."""
    node = root
    for token in ref[1:].split("/")[1:]:
        token = token.replace("~1", "/").replace("~0", "~")
        node = node[int(token)] if isinstance(node, list) else node[token]
    return node


def formats_in(root, schema, instance, fail):
    """Walks instance along schema (objects by properties/additionalProperties, arrays by
    prefixItems/items, $ref by its target, anyOf by a branch jsonschema accepts) and checks
    formats."""
    if not isinstance(schema, dict):
        return
    if "$ref" in schema:
        return formats_in(root, resolve(root, schema["$ref"]), instance, fail)
    for branch in schema.get("anyOf", []):
        resolver = jsonschema.RefResolver.from_schema(root)
        if jsonschema.Draft202012Validator(branch, resolver=resolver).is_valid(instance):
            formats_in(root, branch, instance, fail)
            return
    if isinstance(instance, str) and "format" in schema:
        if not check_format(schema["format"], instance):
            fail("format %s: %r" % (schema["format"], instance))
    if isinstance(instance, dict):
        props = schema.get("properties", {})
        for k, v in instance.items():
            sub = props.get(k, schema.get("additionalProperties"))
            formats_in(root, sub, v, fail)
    if isinstance(instance, list):
        prefix = schema.get("prefixItems", [])
        for i, v in enumerate(instance):
            formats_in(root, prefix[i] if i < len(prefix) else schema.get("items"), v, fail)


def validate_schema(schema_text, output, fail):
    schema = json.loads(schema_text)
    try:
        instance = json.loads(output)
    except ValueError as e:
        fail("not JSON (%s): %r" % (e, output))
        return
    checker = jsonschema.Draft202012Validator.FORMAT_CHECKER
    errors = list(jsonschema.Draft202012Validator(schema, format_checker=checker)
                  .iter_errors(instance))
    for e in errors[:3]:
        fail("invalid (floats): %s at %s: %r" % (e.message, list(e.absolute_path), output))
    exact_schema = json.loads(schema_text, parse_float=decimal.Decimal)
    try:
        exact = json.loads(output, parse_float=decimal.Decimal)
    except decimal.InvalidOperation:
        # An exponent past what Decimal holds (over 10^18): JSON allows it, and only
        # unbounded numbers can have exponents at all; the float check above stands.
        formats_in(schema, schema, instance, fail)
        return
    errors = list(jsonschema.Draft202012Validator(exact_schema).iter_errors(exact))
    for e in errors[:3]:
        fail("invalid (decimals): %s at %s: %r" % (e.message, list(e.absolute_path), output))
    formats_in(schema, schema, instance, fail)


def main():
    # Outputs may carry any exponent JSON allows: exact decimals must not overflow.
    ctx = decimal.getcontext()
    ctx.Emax, ctx.Emin, ctx.prec = decimal.MAX_EMAX, decimal.MIN_EMIN, 2000
    failures = 0
    total = 0
    for line in sys.stdin:
        if not line.strip():
            continue
        case = json.loads(line)
        total += 1
        out = case["output"]

        def fail(msg):
            nonlocal failures
            failures += 1
            print("FAIL %s: %s" % (case["kind"], msg))

        if case["kind"] in ("json", "json_object"):
            try:
                v = json.loads(out)
                if case["kind"] == "json_object" and not isinstance(v, dict):
                    fail("not an object: %r" % out)
            except ValueError as e:
                fail("not JSON (%s): %r" % (e, out))
        elif case["kind"] == "schema":
            validate_schema(case["schema"], out, fail)
        else:
            fail("unknown kind")
    print("oracle: %d outputs, %d failures" % (total, failures))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
