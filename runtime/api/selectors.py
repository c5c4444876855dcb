"""Cluster selectors: label-selector text -> NodeSelector terms, and matching against labels.

Semantics are the core NodeSelector's: terms ORed, a term's requirements ANDed; a selector with
no term selects every cluster (docs/offloading.md), while a term with no requirement selects none.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from runtime.api.core import NodeSelector, NodeSelectorRequirement, NodeSelectorTerm, SelectorOperator

_SET_RE = re.compile(r"^(?P<key>[^\s!=()]+)\s+(?P<op>in|notin)\s*\((?P<values>[^()]*)\)$")
_EQ_RE = re.compile(r"^(?P<key>[^\s!=()]+)\s*(?P<op>==|=|!=)\s*(?P<value>[^\s!=(),]*)$")
_KEY_RE = re.compile(r"^(?P<neg>!?)\s*(?P<key>[^\s!=(),]+)$")


class SelectorSyntaxError(ValueError):
    pass


def _split_requirements(text: str) -> list[str]:
    """Split on commas that are not inside parentheses."""
    parts: list[str] = []
    current: list[str] = []
    depth = 0
    for ch in text:
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
            if depth < 0:
                raise SelectorSyntaxError(f"unbalanced ')' in {text!r}")
        if ch == "," and depth == 0:
            parts.append("".join(current).strip())
            current = []
        else:
            current.append(ch)
    if depth != 0:
        raise SelectorSyntaxError(f"unbalanced '(' in {text!r}")
    parts.append("".join(current).strip())
    return parts


_VALUE_RE = re.compile(r"(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?")


def parse_requirement(text: str) -> NodeSelectorRequirement:
    if match := _SET_RE.match(text):
        values = [v.strip() for v in match["values"].split(",") if v.strip()]
        if not values:
            raise SelectorSyntaxError(f"{text!r}: a set needs at least one value")
        invalid = [v for v in values if not _VALUE_RE.fullmatch(v)]
        if invalid:
            raise SelectorSyntaxError(f"{text!r}: {invalid} are not label values (separate values with commas)")
        operator: SelectorOperator = "In" if match["op"] == "in" else "NotIn"
        return NodeSelectorRequirement(key=match["key"], operator=operator, values=values)
    if match := _EQ_RE.match(text):
        operator = "NotIn" if match["op"] == "!=" else "In"
        return NodeSelectorRequirement(key=match["key"], operator=operator, values=[match["value"]])
    if match := _KEY_RE.match(text):
        operator = "DoesNotExist" if match["neg"] else "Exists"
        return NodeSelectorRequirement(key=match["key"], operator=operator)
    raise SelectorSyntaxError(
        f"{text!r} is not a label requirement: use key, !key, key=value, key!=value, key in (a,b) or key notin (a,b)"
    )


def parse_term(text: str) -> NodeSelectorTerm:
    """One selector string (requirements separated by commas, ANDed) -> one term."""
    if not text.strip():
        raise SelectorSyntaxError("an empty selector string: leave the selector out to select every cluster")
    return NodeSelectorTerm(match_expressions=[parse_requirement(part) for part in _split_requirements(text)])


def parse_selector(texts: list[str]) -> NodeSelector:
    """Several selector strings -> one term each, ORed (the CLI's repeated --selector)."""
    return NodeSelector(node_selector_terms=[parse_term(text) for text in texts])


def requirement_matches(req: NodeSelectorRequirement, labels: Mapping[str, str]) -> bool:
    value = labels.get(req.key)
    values = req.values or []
    match req.operator:
        case "In":
            return value is not None and value in values
        case "NotIn":
            return value is None or value not in values
        case "Exists":
            return value is not None
        case "DoesNotExist":
            return value is None
        case "Gt" | "Lt":
            try:
                actual, bound = int(value or ""), int(values[0])
            except (ValueError, IndexError):
                return False
            return actual > bound if req.operator == "Gt" else actual < bound
    return False


def term_matches(term: NodeSelectorTerm, labels: Mapping[str, str]) -> bool:
    requirements = term.match_expressions or []
    if not requirements:
        return False
    return all(requirement_matches(req, labels) for req in requirements)


def selector_matches(selector: NodeSelector, labels: Mapping[str, str]) -> bool:
    if not selector.node_selector_terms:
        return True
    return any(term_matches(term, labels) for term in selector.node_selector_terms)


def format_requirement(req: NodeSelectorRequirement) -> str:
    """A requirement in the `--selector` syntax (the inverse of `parse_requirement`)."""
    values = req.values or []
    match req.operator:
        case "In":
            return f"{req.key}={values[0]}" if len(values) == 1 else f"{req.key} in ({','.join(values)})"
        case "NotIn":
            return f"{req.key}!={values[0]}" if len(values) == 1 else f"{req.key} notin ({','.join(values)})"
        case "Exists":
            return req.key
        case "DoesNotExist":
            return f"!{req.key}"
    return f"{req.key} {req.operator} {values[0] if values else ''}".rstrip()  # Gt, Lt: no CLI syntax


def format_selector(selector: NodeSelector) -> str:
    """The selector as the `--selector` flags that make it; every cluster when it has no term."""
    if not selector.node_selector_terms:
        return "(none: every cluster)"
    return " ".join(
        "--selector '" + ", ".join(format_requirement(r) for r in term.match_expressions or []) + "'"
        for term in selector.node_selector_terms
    )
