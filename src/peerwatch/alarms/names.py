"""Which values may reach a remediation command: node names as the schedulers accept them, no options.

A node name comes from metric labels, which anyone who can push a metric controls. Before it is
put into a command it must be a name the scheduler itself would accept, so that it can be
neither an option (``--selector=...`` would drain every matching node) nor a hostlist
expression (Slurm expands ``gpu[001-512]`` and ``a,b``). The rules (``NAME_RULES``) are the
schedulers' own, as documented:

- Kubernetes: a node is named as most objects are, by an RFC 1123 DNS subdomain: at most 253
  characters, lowercase letters, digits, ``-`` and ``.``, starting and ending with a letter or a
  digit (kubernetes.io, "Object Names and IDs").
- Slurm: node names are host names, case-sensitive (``scontrol``: "node names LX and lx are
  distinct"); ``scontrol update nodename=X`` reads X as a hostlist, so ``[``, ``]`` and ``,``
  would name other nodes: letters, digits, ``-``, ``_`` and ``.`` only.
- Backend.AI: an agent id is the agent's configured ``id``, by default ``i-<hostname>`` (or the
  cloud instance id, ``i-0abc...``): the same characters as a host name.

A command that runs a shell (``sh -c``, ``bash``, ``ssh`` which hands its arguments to a remote
shell, ...) parses its arguments again; such templates are refused unless the configuration says
``remediation.allow_shell: true``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import PurePosixPath

# Letters, digits, '-', '_' and '.', a letter or digit at each end: a host name (with '_', which
# some sites use) and nothing a command line or a hostlist reads specially.
_HOSTNAME = r"[A-Za-z0-9](?:[A-Za-z0-9_.-]*[A-Za-z0-9])?"
_LABEL = r"[a-z0-9](?:[-a-z0-9]*[a-z0-9])?"
MAX_LENGTH = 253  # a DNS name's limit; the schedulers' own limits are no lower for names they accept

# Programs that parse their arguments as shell code, here or on another host.
SHELLS = frozenset(
    {"sh", "bash", "dash", "zsh", "ksh", "mksh", "ash", "csh", "tcsh", "fish", "busybox", "ssh", "su", "eval"}
)


class InvalidValue(ValueError):
    """A value that must not reach a command; the message says which value, why, and the rule."""


@dataclass(frozen=True, slots=True)
class NameRule:
    """What one scheduler accepts as a node name."""

    scheduler: str
    pattern: re.Pattern[str]
    description: str

    def check(self, what: str, name: str) -> None:
        """Raise :class:`InvalidValue` unless ``name`` is a node name this scheduler accepts."""
        if len(name) > MAX_LENGTH or not self.pattern.fullmatch(name):
            raise InvalidValue(f"{what} {name!r} is not a valid {self.scheduler} node name ({self.description})")


NAME_RULES: Mapping[str, NameRule] = {
    "kubernetes": NameRule(
        "Kubernetes",
        re.compile(rf"{_LABEL}(?:\.{_LABEL})*"),
        "an RFC 1123 subdomain: lowercase letters, digits, '-' and '.', a letter or digit at each end, "
        f"at most {MAX_LENGTH} characters",
    ),
    "slurm": NameRule(
        "Slurm",
        re.compile(_HOSTNAME),
        "a host name: letters, digits, '-', '_' and '.', a letter or digit at each end, no hostlist "
        f"characters '[', ']' or ',', at most {MAX_LENGTH} characters",
    ),
    "backendai": NameRule(
        "Backend.AI",
        re.compile(_HOSTNAME),
        "an agent id such as i-<hostname>: letters, digits, '-', '_' and '.', a letter or digit at each end, "
        f"at most {MAX_LENGTH} characters",
    ),
    "hostname": NameRule(
        "host",
        re.compile(_HOSTNAME),
        f"letters, digits, '-', '_' and '.', a letter or digit at each end, at most {MAX_LENGTH} characters",
    ),
}
NAMED = ("node", "spare")  # the placeholders that hold node names
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


def check_values(values: Mapping[str, str], commands: Sequence[Sequence[str]], rule: NameRule) -> None:
    """Raise :class:`InvalidValue` when a value must not be put into ``commands``: a node name
    ``rule`` rejects, a control character anywhere, or a value that would stand alone as an
    argument starting with ``-`` (an option, whatever the program)."""
    used = {name for argv in commands for arg in argv for name in values if "{" + name + "}" in arg}
    for name in sorted(used):
        value = values[name]
        if name in NAMED:
            rule.check(name, value)
        if _CONTROL.search(value):
            raise InvalidValue(f"{name} {value!r} holds a control character")
    for argv in commands:
        for arg in argv:
            key = arg[1:-1] if arg.startswith("{") and arg.endswith("}") else ""
            if key in values and values[key].startswith("-"):
                raise InvalidValue(f"{key} {values[key]!r} would be read as an option by {argv[0]}")


def shell_in(argv: Sequence[str]) -> str | None:
    """The argument of ``argv`` that starts a shell (``/bin/sh``, ``bash``, ``ssh``...), or None;
    any position counts, so ``sudo sh -c`` and ``env bash -c`` are found too."""
    for arg in argv:
        if PurePosixPath(arg).name in SHELLS:
            return arg
    return None
