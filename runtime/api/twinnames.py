"""Which twin namespace names a foreign cluster lets a home cluster take (docs/security.md#twin-names).

A home gets `<namespace>-<home id>` (DefaultName). Any other name (EnforceSameName, SelectedName) only
where the foreign side declares it for that home: `twinNames`, names or patterns in which `*` stands for
any run of lower-case letters, digits and '-' (`team-*`). Never, whatever is declared:
- a name reserved in every cluster: `kube-*`, `liqo*` (the tenant namespaces among them), `default`;
- a name in another home's DefaultName space: `x-home-2` is home-2's twin of `x`, present or future.
  Names are ambiguous across homes (home `a`'s twin of `x-b` and home `b-a`'s twin of `x` are both
  `x-b-a`), so a name belongs to the served home with the longest id it ends with (`-<id>`): a home
  takes no name in the space of a home with a longer id, which that home may need.
  A home not served yet is unknown: its future twins are protected only by the agent's refusal to
  adopt an existing namespace (it gets CreationFailed, never another home's namespace).

The rules are written once here and applied three times: the stack's config validation (the declared
patterns), the foreign API server's admission policy on NamespaceMaps (CEL, from the same constants:
liqo_stack/declaring/manifests.py) and the foreign agent before it creates a twin.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable

from runtime.api import names

# Reserved in every cluster (globs); the tenant pattern is within `liqo*`, kept so a renamed tenant stays reserved.
RESERVED: tuple[str, ...] = ("kube-*", "liqo*", "default", names.tenant_namespace("*"))
PATTERN_RULE = (
    "a namespace name, or a pattern where `*` stands for any run of lower-case letters, digits and '-' (e.g. team-*)"
)
# What `*` stands for, as a regular expression (RE2 and Python alike): the characters of a namespace name.
STAR = "[-a-z0-9]*"
_PATTERN = re.compile(r"[-a-z0-9*]{1,63}")


def pattern_problem(pattern: str) -> str | None:
    """Why `pattern` is no twin-name pattern, said of it (None: it is one)."""
    if not _PATTERN.fullmatch(pattern):
        return f"is not {PATTERN_RULE}"
    if not (names.is_dns_label(pattern.replace("*", "a")) or names.is_dns_label(pattern.replace("*", ""))):
        return f"matches no namespace name ({names.DNS_LABEL_RULE}, starting and ending with a letter or digit)"
    return None


def glob_regex(pattern: str) -> str:
    """`pattern` as an anchored regular expression (its characters other than `*` are literal in one)."""
    return "^" + pattern.replace("*", STAR) + "$"


def matches(pattern: str, name: str) -> bool:
    return re.fullmatch(glob_regex(pattern), name) is not None


def overlap(a: str, b: str) -> bool:
    """Some name matches both patterns."""

    @functools.cache
    def common(i: int, j: int) -> bool:  # a name matching a[i:] and b[j:]
        if i == len(a) or j == len(b):
            rest = a[i:] + b[j:]
            return set(rest) <= {"*"}
        if a[i] == "*" and b[j] == "*":  # the shortest common name leaves one of the two empty
            return common(i + 1, j) or common(i, j + 1)
        if a[i] == "*":  # empty, or it takes b's next character
            return common(i + 1, j) or common(i, j + 1)
        if b[j] == "*":
            return common(i, j + 1) or common(i + 1, j)
        return a[i] == b[j] and common(i + 1, j + 1)

    return common(0, 0)


def reserved_by(pattern: str) -> str | None:
    """The reserved pattern `pattern` (or a name) can name a namespace of; None: none."""
    return next((reserved for reserved in RESERVED if overlap(pattern, reserved)), None)


def default_name_owner(name: str, homes: Iterable[str]) -> str | None:
    """The home whose DefaultName space holds `name`: of the homes whose `-<id>` ends it, the longest id."""
    owners = [home for home in homes if name.endswith(f"-{home}") and len(name) > len(home) + 1]
    return max(owners, key=len, default=None)


def parse_allowed(text: str | None) -> tuple[str, ...]:
    """The patterns of a tenant namespace's annotation (comma-separated); one that is not a pattern
    (a hand edit) allows nothing, as it matches nothing in the admission policy either."""
    found = (part.strip() for part in (text or "").split(","))
    return tuple(p for p in found if p and pattern_problem(p) is None)


def format_allowed(patterns: Iterable[str]) -> str:
    return ",".join(patterns)


def refusal(home_id: str, namespace: str, twin: str, allowed: Iterable[str], served_homes: Iterable[str]) -> str | None:
    """Why this cluster refuses `twin` as home `home_id`'s twin of its `namespace`, said of it (None: allowed).
    `allowed`: the patterns the foreign side declared for that home; `served_homes`: the homes it serves."""
    reserved = reserved_by(twin)
    if reserved is not None:
        return f"it is a name reserved in every cluster ({reserved}): no home may take it"
    owner = default_name_owner(twin, {home_id, *served_homes})
    if owner is not None and owner != home_id:
        return f"it is in home cluster {owner}'s DefaultName space (<namespace>-{owner}): no other home may take it"
    if twin == f"{namespace}-{home_id}":
        return None
    declared = list(allowed)
    if any(matches(pattern, twin) for pattern in declared):
        return None
    return (
        f"it is not a name this cluster allows home cluster {home_id}: a home gets <namespace>-{home_id} "
        f"({namespace}-{home_id} here), and other names only where the foreign side declares them for it "
        f"(twinNames: {', '.join(declared) or 'none'})"
    )


def declared_pattern_problem(pattern: str, home_id: str, other_homes: Iterable[str] = ()) -> str | None:
    """Why a foreign side may not declare `pattern` in `home_id`'s twinNames (None: it may). A pattern
    that can name a reserved namespace is refused; one whose every name is in another home's DefaultName
    space too (its fixed end is `-<that home's id>`). A pattern that only may (`team-*` names
    `team-x-home-2`) is allowed: the names of it that are refused are refused when asked for."""
    problem = pattern_problem(pattern)
    if problem is not None:
        return problem
    reserved = reserved_by(pattern)
    if reserved is not None:
        return f"can name {reserved}, reserved in every cluster ({', '.join(RESERVED)})"
    fixed_end = pattern.rpartition("*")[2] if "*" in pattern else pattern
    owners = [home for home in {home_id, *other_homes} if fixed_end.endswith(f"-{home}")]
    owner = max(owners, key=len, default=None)
    if owner is not None and owner != home_id:
        return f"names twins in home cluster {owner}'s DefaultName space (<namespace>-{owner})"
    return None
