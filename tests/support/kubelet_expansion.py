"""What the kubelet does to a container's command, args and env values before the runtime starts it.

A port of Kubernetes' `$(VAR)` expansion, k8s.io/kubernetes third_party/forked/golang/expansion/expand.go
(`Expand`, `tryReadVariableName`, `MappingFuncFor`), and of the order the kubelet applies it in
(pkg/kubelet/kubelet_pods.go `makeEnvironmentVariables`; pkg/kubelet/container/helpers.go
`ExpandContainerCommandAndArgs`), as documented for the API ("Variable references $(VAR_NAME) are expanded using the
previously defined environment variables in the container and any service environment variables. If a variable
cannot be resolved, the reference in the input string will be unchanged. Double $$ are reduced to a single $, which
allows for escaping the $(VAR_NAME) syntax"):

- env: in order, a `value` is expanded against the variables defined before it in the container, then the service
  variables; a `valueFrom` value (ConfigMap, Secret, field) is taken as it is, never expanded.
- command and args: every item is expanded against the container's final environment (service variables overlaid
  by the container's own).

`value_from` supplies what the kubelet would read for each `valueFrom` variable (the test decides what the ConfigMap
holds); a `valueFrom` with no entry there is an error, so a test cannot forget one.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

OPERATOR, OPENER, CLOSER = "$", "(", ")"


def _syntax_wrap(name: str) -> str:
    return f"{OPERATOR}{OPENER}{name}{CLOSER}"


def mapping_func_for(*contexts: Mapping[str, str]) -> Callable[[str], str]:
    """The first context holding `name` wins; an unknown name is left as the reference it was."""

    def mapping(name: str) -> str:
        for ctx in contexts:
            if name in ctx:
                return ctx[name]
        return _syntax_wrap(name)

    return mapping


def _try_read_variable_name(text: str) -> tuple[str, bool, int]:
    """(what was read, whether it is a variable name, how many characters it consumed) after a `$`."""
    if text[0] == OPERATOR:  # `$$`: an escaped operator
        return text[0:1], False, 1
    if text[0] == OPENER:
        for i in range(1, len(text)):
            if text[i] == CLOSER:
                return text[1:i], True, i + 1
        return OPERATOR + OPENER, False, 1  # an incomplete reference is returned as is
    return OPERATOR + text[0], False, 1  # an operator that starts no expression


def expand(text: str, mapping: Callable[[str], str]) -> str:
    out: list[str] = []
    checkpoint = 0
    cursor = 0
    while cursor < len(text):
        if text[cursor] == OPERATOR and cursor + 1 < len(text):
            out.append(text[checkpoint:cursor])
            read, is_var, advance = _try_read_variable_name(text[cursor + 1 :])
            out.append(mapping(read) if is_var else read)
            cursor += advance
            checkpoint = cursor + 1
        cursor += 1
    return "".join(out) + text[checkpoint:]


def container_env(
    container: Mapping[str, Any],
    value_from: Mapping[str, str] | None = None,
    service_env: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """The environment the kubelet gives the container (service variables overlaid by its own)."""
    service = dict(service_env or {})
    own: dict[str, str] = {}
    for var in container.get("env", []):
        name = var["name"]
        if "valueFrom" in var:
            if value_from is None or name not in value_from:
                raise KeyError(f"{name} comes from valueFrom: say what the kubelet would read for it")
            own[name] = value_from[name]
        else:
            own[name] = expand(str(var.get("value", "")), mapping_func_for(own, service))
    return {**service, **own}


def expand_container(
    container: Mapping[str, Any],
    value_from: Mapping[str, str] | None = None,
    service_env: Mapping[str, str] | None = None,
) -> tuple[list[str], dict[str, str]]:
    """(command + args, environment) as the container's process gets them."""
    env = container_env(container, value_from, service_env)
    mapping = mapping_func_for(env)
    argv = [expand(str(a), mapping) for a in [*container.get("command", []), *container.get("args", [])]]
    return argv, env
