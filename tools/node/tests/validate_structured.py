"""Checks structured outputs independently of kvfork: reads JSON lines
{"kind": "schema"|"regex"|"choice"|"json_object", "text": ..., and "schema",
"pattern" or "choices"}, validates each with Python's json, re and
jsonschema (Debian python3-jsonschema), and prints one JSON line per
failure. Exit status 1 if any failed."""
import json
import re
import sys

import jsonschema
from jsonschema.validators import validator_for

failures = 0
checked = 0
for line in sys.stdin:
    if not line.strip():
        continue
    case = json.loads(line)
    checked += 1
    text = case["text"]
    try:
        if case["kind"] == "schema":
            schema = case["schema"]
            cls = validator_for(schema, default=jsonschema.Draft202012Validator)
            cls.check_schema(schema)
            cls(schema).validate(json.loads(text))
        elif case["kind"] == "json_object":
            if not isinstance(json.loads(text), dict):
                raise ValueError("not an object")
        elif case["kind"] == "regex":
            if re.fullmatch(case["pattern"], text) is None:
                raise ValueError("does not match")
        elif case["kind"] == "choice":
            if text not in case["choices"]:
                raise ValueError("not one of the choices")
        else:
            raise ValueError("unknown kind")
    except Exception as e:  # any failure is reported with its case
        failures += 1
        print(json.dumps({"case": case, "error": f"{type(e).__name__}: {e}"}))
print(json.dumps({"checked": checked, "failures": failures}))
sys.exit(1 if failures else 0)
