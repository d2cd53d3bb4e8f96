"""What kube-apiserver checks when a CustomResourceDefinition is registered.

kmock stores any CRD; a real API server (apiextensions-apiserver, seen on 1.36) refuses
one that breaks any of the checks below, and then nothing of kubellm can be installed.
Each function returns a list of messages (empty = the server would accept that part), so
a test can show both the clean CRD and a planted violation.

- ``structural_errors``: the schema must be structural (apiextensions' "structural
  schema" rules): every field typed, ``properties`` and ``additionalProperties`` never
  side by side, ``anyOf``/``allOf``/``oneOf``/``not`` carrying no types, defaults or
  descriptions (but the int-or-string pattern), list-map keys required or defaulted.
- ``default_errors``: every ``default`` validates against the schema it sits in, is
  already pruned (no field the schema does not know), and every CEL rule in its scope
  evaluates without error on it *raw*: the server does not fill nested defaults into a
  default before it runs the rules (the `autoscaling: {}` failure of the first real
  install).
- ``cel_errors``: every rule compiles, names only fields that the schema declares (the
  server type-checks ``self`` against the schema), and its estimated cost stays under the
  server's per-rule and per-CRD budgets, where unbounded lists, maps and strings are
  assumed as large as a request can make them.
"""
from __future__ import annotations

import copy
from typing import Any, Iterator

import celpy
import jsonschema
import lark

Schema = dict[str, Any]
Path = tuple[str, ...]

# apiextensions-apiserver's limits (pkg/apiserver/schema/cel): the estimated cost of one
# rule, of all rules of a CRD, and the request size the unbounded estimates derive from.
PER_RULE_COST_LIMIT = 10_000_000
PER_CRD_COST_LIMIT = 100_000_000
MAX_REQUEST_BYTES = 3 * 1024 * 1024
# Smallest JSON encodings an element can have, which bound how many fit in a request.
MIN_ELEMENT_BYTES = {"string": 3, "integer": 2, "number": 2, "boolean": 5, "object": 3,
                     "array": 3}
ITERATING_MACROS = {"all", "exists", "exists_one", "map", "filter"}
STRING_SCANS = {"matches", "contains", "startsWith", "endsWith", "indexOf", "lastIndexOf",
                "split", "replace", "lowerAscii", "upperAscii", "trim"}
JUNCTORS = ("anyOf", "allOf", "oneOf", "not")
# Inside a junctor only value validations may appear (structural rule 3).
FORBIDDEN_IN_JUNCTOR = {"type", "description", "default", "additionalProperties",
                        "nullable", "x-kubernetes-preserve-unknown-fields",
                        "x-kubernetes-embedded-resource", "x-kubernetes-validations"}


def walk(schema: Schema, path: Path = ()) -> Iterator[tuple[Path, Schema]]:
    """Every schema node with its field path (``[]`` for array items, ``*`` for map values)."""
    yield path, schema
    for key, sub in (schema.get("properties") or {}).items():
        yield from walk(sub, path + (key,))
    if isinstance(schema.get("items"), dict):
        yield from walk(schema["items"], path + ("[]",))
    if isinstance(schema.get("additionalProperties"), dict):
        yield from walk(schema["additionalProperties"], path + ("*",))


def _name(path: Path) -> str:
    return ".".join(path) or "<root>"


# --- structural -------------------------------------------------------------------------

def _is_int_or_string_pattern(node: Schema) -> bool:
    return node.get("x-kubernetes-int-or-string") is True


def structural_errors(schema: Schema) -> list[str]:
    errors = []
    for path, node in walk(schema):
        where = _name(path)
        exempt = _is_int_or_string_pattern(node) or \
            node.get("x-kubernetes-preserve-unknown-fields") is True
        if "type" not in node and not exempt:
            errors.append(f"{where}: type: Required value: must not be empty for "
                          "specified object fields")
        if _is_int_or_string_pattern(node) and "type" in node:
            errors.append(f"{where}: type: must be empty with x-kubernetes-int-or-string")
        if "properties" in node and "additionalProperties" in node:
            errors.append(f"{where}: additionalProperties and properties are mutually "
                          "exclusive")
        if node.get("type") == "array" and "items" not in node:
            errors.append(f"{where}: items: Required value: must be specified for arrays")
        for junctor in JUNCTORS:
            for sub in _as_list(node.get(junctor)):
                bad = FORBIDDEN_IN_JUNCTOR & set(sub)
                if _is_int_or_string_pattern(node) and junctor == "anyOf" and \
                        bad == {"type"}:
                    continue  # anyOf: [{type: integer}, {type: string}] is the allowed form
                if bad:
                    errors.append(f"{where}.{junctor}: must not carry {sorted(bad)}")
        errors += _list_type_errors(where, node)
        if node.get("x-kubernetes-embedded-resource") and node.get("type") != "object":
            errors.append(f"{where}: x-kubernetes-embedded-resource needs type object")
    return errors


def _as_list(value: Any) -> list[Schema]:
    if value is None:
        return []
    return value if isinstance(value, list) else [value]


def _list_type_errors(where: str, node: Schema) -> list[str]:
    list_type, keys = node.get("x-kubernetes-list-type"), node.get("x-kubernetes-list-map-keys")
    if keys is not None and list_type != "map":
        return [f"{where}: x-kubernetes-list-map-keys needs x-kubernetes-list-type map"]
    if list_type is not None and node.get("type") != "array":
        return [f"{where}: x-kubernetes-list-type is only allowed on arrays"]
    if list_type != "map":
        return []
    item = node.get("items") or {}
    if item.get("type") != "object" or not keys:
        return [f"{where}: a map list needs object items and x-kubernetes-list-map-keys"]
    errors = []
    for key in keys:
        field = (item.get("properties") or {}).get(key)
        if field is None or field.get("type") not in ("string", "integer", "number",
                                                       "boolean"):
            errors.append(f"{where}: map key {key} must be a scalar property of the items")
        elif key not in item.get("required", []) and "default" not in field:
            errors.append(f"{where}: map key {key} must be required or have a default")
    return errors


# --- defaults ---------------------------------------------------------------------------

def _pruned(schema: Schema, value: Any) -> Any:
    """``value`` with the fields ``schema`` does not know removed, as the server prunes."""
    if isinstance(value, dict) and schema.get("type") == "object" and \
            not schema.get("x-kubernetes-preserve-unknown-fields"):
        props, extra = schema.get("properties"), schema.get("additionalProperties")
        if props is not None:
            return {k: _pruned(props[k], v) for k, v in value.items() if k in props}
        if isinstance(extra, dict):
            return {k: _pruned(extra, v) for k, v in value.items()}
        return {}
    if isinstance(value, list) and isinstance(schema.get("items"), dict):
        return [_pruned(schema["items"], v) for v in value]
    return value


def default_errors(schema: Schema) -> list[str]:
    errors = []
    for path, node in walk(schema):
        if "default" not in node:
            continue
        where, default = _name(path), node["default"]
        for e in jsonschema.Draft4Validator(node).iter_errors(default):
            errors.append(f"{where}.default: {e.message}")
        if _pruned(node, default) != default:
            errors.append(f"{where}.default: must not have unknown fields (it would be "
                          "pruned)")
        errors += [f"{where}.default: {m}" for m in rule_errors_on_value(node, default)]
    return errors


def rule_errors_on_value(schema: Schema, value: Any, path: Path = ()) -> list[str]:
    """Run every rule of ``schema``'s subtree on ``value`` as it is (no defaulting).

    A rule sits on a node and runs where the value has that node; errors (a missing key)
    and false verdicts are both reported, as the server refuses on either."""
    errors = []
    for rule in schema.get("x-kubernetes-validations") or []:
        try:
            verdict = evaluate(rule["rule"], value)
        except celpy.CELEvalError as e:
            errors.append(f"{e.args[0]} evaluating rule: {rule.get('message', rule['rule'])}")
            continue
        if verdict is not True and bool(verdict) is not True:
            errors.append(f"{_name(path)}: Invalid value: {rule.get('message', rule['rule'])}")
    if isinstance(value, dict):
        for key, sub in (schema.get("properties") or {}).items():
            if key in value:
                errors += rule_errors_on_value(sub, value[key], path + (key,))
        extra = schema.get("additionalProperties")
        if isinstance(extra, dict):
            for key, item in value.items():
                errors += rule_errors_on_value(extra, item, path + (key,))
    if isinstance(value, list) and isinstance(schema.get("items"), dict):
        for i, item in enumerate(value):
            errors += rule_errors_on_value(schema["items"], item, path + (f"[{i}]",))
    return errors


_CEL = celpy.Environment()


def evaluate(rule: str, value: Any) -> Any:
    program = _CEL.program(_CEL.compile(rule))
    return program.evaluate({"self": celpy.json_to_cel(copy.deepcopy(value))})


# --- CEL: compile, type-check, cost -----------------------------------------------------

def _self_path(member: lark.Tree) -> Path | None:
    """``self.a.b`` as ('a', 'b'); None when the chain does not start at ``self``."""
    names: list[str] = []
    node = member
    while True:
        if node.data == "member" and len(node.children) == 1:
            node = node.children[0]
        elif node.data == "member_dot":
            names.append(str(node.children[1]))
            node = node.children[0]
        elif node.data == "primary" and len(node.children) == 1 and \
                isinstance(node.children[0], lark.Tree) and node.children[0].data == "ident":
            ident = str(node.children[0].children[0])
            return tuple(reversed(names)) if ident == "self" else None
        else:
            return None


def _field_references(tree: lark.Tree) -> Iterator[Path]:
    for node in tree.iter_subtrees():
        if node.data == "member_dot":
            path = _self_path(node)
            if path:
                yield path


def _method_calls(tree: lark.Tree) -> Iterator[tuple[str, Path | None]]:
    """(method name, receiver path below ``self`` or None) of every ``x.method(...)``."""
    for node in tree.iter_subtrees():
        if node.data == "member_dot_arg":
            yield str(node.children[1]), _self_path(node.children[0])


def resolve(schema: Schema, path: Path) -> Schema | None:
    """The schema node that ``self.<path>`` reads, or None if the schema has no such field."""
    node = schema
    for key in path:
        if node.get("x-kubernetes-preserve-unknown-fields"):
            return {}
        if key in (node.get("properties") or {}):
            node = node["properties"][key]
        elif isinstance(node.get("additionalProperties"), dict):
            node = node["additionalProperties"]
        else:
            return None
    return node


def max_size(node: Schema) -> int:
    """Most elements (lists, maps) or characters (strings) a request can give ``node``."""
    if node.get("type") == "array":
        item_type = (node.get("items") or {}).get("type", "object")
        return node.get("maxItems", MAX_REQUEST_BYTES // MIN_ELEMENT_BYTES[item_type])
    if node.get("type") == "object":
        return node.get("maxProperties", MAX_REQUEST_BYTES // 4)
    if node.get("type") == "string":
        return node.get("maxLength", MAX_REQUEST_BYTES)
    return 1


def rule_cost(node: Schema, rule: str) -> int:
    """An upper estimate of one evaluation: 1 per operation, times the size of whatever a
    macro iterates or a string function scans."""
    tree = _CEL.compile(rule)
    cost = 1 + sum(1 for _ in tree.iter_subtrees())
    for method, receiver in _method_calls(tree):
        target = resolve(node, receiver) if receiver is not None else None
        if method in ITERATING_MACROS or method in STRING_SCANS:
            # A receiver that is not a field of self (a loop variable) is sized as the
            # largest thing a request can hold.
            size = max_size(target) if target is not None else MAX_REQUEST_BYTES
            cost += size * (10 if method in ITERATING_MACROS else 1)
    return cost


def _times_evaluated(schema: Schema, path: Path) -> int:
    """How often a rule at ``path`` runs per object: the product of enclosing list sizes."""
    count, node = 1, schema
    for key in path:
        if key == "[]":
            count *= max_size(node)
            node = node["items"]
        elif key == "*":
            count *= max_size(node)
            node = node["additionalProperties"]
        else:
            node = node["properties"][key]
    return count


def cel_errors(schema: Schema) -> list[str]:
    errors, total = [], 0
    for path, node in walk(schema):
        for entry in node.get("x-kubernetes-validations") or []:
            rule, where = entry.get("rule", ""), _name(path)
            try:
                tree = _CEL.compile(rule)
            except celpy.CELParseError as e:
                errors.append(f"{where}: rule {rule!r} does not compile: {e}")
                continue
            for ref in _field_references(tree):
                if resolve(node, ref) is None:
                    errors.append(f"{where}: rule {rule!r}: undefined field "
                                  f"'{'.'.join(ref)}'")
            cost = rule_cost(node, rule)
            if cost > PER_RULE_COST_LIMIT:
                errors.append(f"{where}: rule {rule!r}: estimated cost {cost} exceeds the "
                              f"per-rule budget {PER_RULE_COST_LIMIT}; bound the lists and "
                              "strings it reads (maxItems, maxLength)")
            total += cost * _times_evaluated(schema, path)
    if total > PER_CRD_COST_LIMIT:
        errors.append(f"estimated total rule cost {total} exceeds the CRD budget "
                      f"{PER_CRD_COST_LIMIT}")
    return errors


def registration_errors(crd: dict[str, Any]) -> list[str]:
    """Everything above, for every version of ``crd``."""
    errors = []
    for version in crd["spec"]["versions"]:
        schema = version["schema"]["openAPIV3Schema"]
        errors += structural_errors(schema) + default_errors(schema) + cel_errors(schema)
    return errors
