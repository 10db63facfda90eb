#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""The independent oracle for the grammar engine's tests (test_grammar*.c): every output of a
constrained walk, checked by code that shares nothing with daemon/grammar/.

Input (stdin): JSON lines {"kind": "json" | "json_object" | "schema", "schema": ..., "output":
"...", "name": "..." (optional: which case, for the failure's line)}. A JSON output must parse with json.loads (an object for json_object); a schema output
must parse and validate under python3-jsonschema, twice: with floats (how most validators
compare numbers) and with exact decimals for both the schema and the output (JSON Schema's
mathematical values).

The validator is the one of the schema's draft ($schema: drafts 4, 6, 7, 2019-09, 2020-12;
2020-12 without one, or with one it does not know), as the specification says. Two forms that
have only one meaning in any draft are read so in every draft, as the engine reads them:
draft 4's boolean exclusiveMinimum/exclusiveMaximum, and the array form of "items" (2020-12's
validator gets them as their 2020-12 spellings). Formats are checked wherever they apply (in
anyOf branches, under patternProperties...), by jsonschema's FormatChecker with these checks
added, written here from their RFCs: date-time, time, date, duration, hostname, email,
idn-email, json-pointer, relative-json-pointer, and uri/uri-reference/iri/iri-reference when
python3-rfc3987 is not installed (with it, jsonschema's own checks).

Prints one line per failure and a summary; exit 0 when every output is valid, 1 otherwise, 77
when jsonschema is missing.
"""
import datetime
import decimal
import json
import re
import sys

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

# RFC 3986 appendix A, written out (no IP-literal hosts among the engine's outputs; an output
# with one would fail here, and so be reported).
UNRESERVED = r"A-Za-z0-9\-._~"
SUB_DELIMS = r"!$&'()*+,;="
PCT = r"%[0-9A-Fa-f]{2}"
PCHAR = r"(?:[" + UNRESERVED + SUB_DELIMS + r":@]|" + PCT + ")"
SEGMENT_NZ_NC = r"(?:[" + UNRESERVED + SUB_DELIMS + r"@]|" + PCT + ")+"
AUTHORITY = (r"(?:(?:[" + UNRESERVED + SUB_DELIMS + r":]|" + PCT + r")*@)?(?:[" + UNRESERVED +
             SUB_DELIMS + r"]|" + PCT + r")*(?::\d*)?")
PATH_ABEMPTY = r"(?:/" + PCHAR + r"*)*"
PATH_ABSOLUTE = r"/(?:" + PCHAR + r"+(?:/" + PCHAR + r"*)*)?"
PATH_ROOTLESS = PCHAR + r"+(?:/" + PCHAR + r"*)*"
PATH_NOSCHEME = SEGMENT_NZ_NC + r"(?:/" + PCHAR + r"*)*"
QUERY = r"(?:" + PCHAR + r"|[/?])*"
URI = (r"[A-Za-z][A-Za-z0-9+.\-]*:(?://" + AUTHORITY + PATH_ABEMPTY + "|" + PATH_ABSOLUTE +
       "|" + PATH_ROOTLESS + r")?(?:\?" + QUERY + r")?(?:#" + QUERY + r")?")
RELATIVE_REF = (r"(?://" + AUTHORITY + PATH_ABEMPTY + "|" + PATH_ABSOLUTE + "|" +
                PATH_NOSCHEME + r")?(?:\?" + QUERY + r")?(?:#" + QUERY + r")?")


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


def check_date_time(s):
    parts = re.split("[Tt]", s)
    return len(parts) == 2 and check_date(parts[0]) and check_time(parts[1])


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


def check_json_pointer(s):
    # RFC 6901 section 3: "/"-prefixed tokens, "~" only as ~0 or ~1.
    return re.fullmatch(r"(/([^/~]|~[01])*)*", s, re.S) is not None


def check_relative_json_pointer(s):
    m = re.fullmatch(r"(0|[1-9][0-9]*)(.*)", s, re.S)
    return m is not None and (m.group(2) == "#" or check_json_pointer(m.group(2)))


OWN_CHECKS = {
    "date-time": check_date_time, "time": check_time, "date": check_date,
    "duration": lambda s: re.fullmatch(DURATION, s) is not None,
    "hostname": check_hostname, "email": check_email, "idn-email": check_email,
    "json-pointer": check_json_pointer, "relative-json-pointer": check_relative_json_pointer,
}
URI_CHECKS = {
    "uri": lambda s: re.fullmatch(URI, s) is not None,
    "iri": lambda s: re.fullmatch(URI, s) is not None,
    "uri-reference": lambda s: re.fullmatch(URI + "|" + RELATIVE_REF, s) is not None,
    "iri-reference": lambda s: re.fullmatch(URI + "|" + RELATIVE_REF, s) is not None,
}


def format_checker():
    c = jsonschema.FormatChecker()
    checks = dict(OWN_CHECKS)
    if "uri" not in c.checkers:  # python3-rfc3987 missing: RFC 3986 written out here
        checks.update(URI_CHECKS)
    for name, fn in checks.items():
        c.checkers[name] = ((lambda f: lambda x: not isinstance(x, str) or f(x))(fn), ())
    return c


DRAFTS = {
    "json-schema.org/draft-04/schema": jsonschema.Draft4Validator,
    "json-schema.org/draft-06/schema": jsonschema.Draft6Validator,
    "json-schema.org/draft-07/schema": jsonschema.Draft7Validator,
    "json-schema.org/draft/2019-09/schema": jsonschema.Draft201909Validator,
    "json-schema.org/draft/2020-12/schema": jsonschema.Draft202012Validator,
}


def validator_for(schema):
    uri = schema.get("$schema") if isinstance(schema, dict) else None
    if isinstance(uri, str):
        uri = uri.rstrip("#")
        for scheme in ("http://", "https://"):
            if uri.startswith(scheme):
                uri = uri[len(scheme):]
        if uri in DRAFTS:
            return DRAFTS[uri]
    return jsonschema.Draft202012Validator


DATA_KEYWORDS = ("enum", "const", "default", "examples")
MAP_KEYWORDS = ("properties", "patternProperties", "$defs", "definitions", "dependentSchemas",
                "dependencies")


def readable(node, cls):
    """The schema with the one-meaning forms in the validator's draft's spelling."""
    if isinstance(node, list):
        return [readable(x, cls) for x in node]
    if not isinstance(node, dict):
        return node
    out = {}
    for k, v in node.items():
        if k in DATA_KEYWORDS:
            out[k] = v
        elif k in MAP_KEYWORDS and isinstance(v, dict):
            out[k] = {kk: readable(vv, cls) for kk, vv in v.items()}
        else:
            out[k] = readable(v, cls)
    if cls is not jsonschema.Draft4Validator:
        for bound, flag in (("minimum", "exclusiveMinimum"), ("maximum", "exclusiveMaximum")):
            if isinstance(out.get(flag), bool):
                if out.pop(flag) and bound in out:
                    out[flag] = out.pop(bound)
    if cls is jsonschema.Draft202012Validator and isinstance(out.get("items"), list):
        out["prefixItems"] = out.pop("items")
        if "additionalItems" in out:
            out["items"] = out.pop("additionalItems")
    return out


CHECKER = format_checker()


def validate_schema(schema_text, output, fail):
    schema = json.loads(schema_text)
    cls = validator_for(schema)
    try:
        instance = json.loads(output)
    except ValueError as e:
        fail("not JSON (%s): %r" % (e, output))
        return
    errors = list(cls(readable(schema, cls), format_checker=CHECKER).iter_errors(instance))
    for e in errors[:3]:
        fail("invalid (floats): %s at %s: %r" % (e.message, list(e.absolute_path), output))
    exact_schema = json.loads(schema_text, parse_float=decimal.Decimal)
    try:
        exact = json.loads(output, parse_float=decimal.Decimal)
    except decimal.InvalidOperation:
        # An exponent past what Decimal holds (over 10^18): JSON allows it, and only
        # unbounded numbers can have exponents at all; the float check above stands.
        return
    errors = list(cls(readable(exact_schema, cls)).iter_errors(exact))
    for e in errors[:3]:
        fail("invalid (decimals): %s at %s: %r" % (e.message, list(e.absolute_path), output))


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
            name = " (%s)" % case["name"] if "name" in case else ""
            print("FAIL %s%s: %s" % (case["kind"], name, msg))

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
