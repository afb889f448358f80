"""The API server's value rules that the published OpenAPI schemas do not carry.

The schemas (what ``kubernetes-validate`` checks) say a label is a string and a resource
limit is a quantity; the API server also checks that a name is a DNS label, a label key a
qualified name, a GPU resource a domain-prefixed extended resource and a quantity a
quantity. A rendered object is walked here for the fields kctl writes, so a value the API
server would refuse is refused before any file is written. Rules as the Kubernetes API
reference states them (``IsDNS1123Label``, ``IsQualifiedName``, ``IsValidLabelValue``,
``IsExtendedResourceName``, ``IsValidPortName``, ``IsEnvVarName``, resource.Quantity).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_QUALIFIED_NAME = re.compile(r"^([A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)$")
_LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")
_PORT_NAME = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_ENV_NAME = re.compile(r"^[-._a-zA-Z][-._a-zA-Z0-9]*$")
_QUANTITY = re.compile(r"^[+-]?([0-9]+(\.[0-9]*)?|\.[0-9]+)([eE][+-]?[0-9]+|[KMGTPE]i|[mkMGTPE])?$")
#: the core resource names; anything else in limits must be an extended resource
_STANDARD_RESOURCES = ("cpu", "memory", "ephemeral-storage")


def dns_label(value: str) -> str | None:
    """Why ``value`` is not a DNS-1123 label (a namespace, a port or container name)."""
    if len(value) > 63 or not _DNS_LABEL.match(value):
        return "must be a DNS-1123 label: at most 63 of a-z, 0-9 and '-', starting and ending alphanumeric"
    return None


def dns_subdomain(value: str) -> str | None:
    """Why ``value`` is not a DNS-1123 subdomain (an object name)."""
    if len(value) > 253 or not _DNS_SUBDOMAIN.match(value):
        return "must be a DNS-1123 subdomain: lower-case alphanumerics, '-' and '.'"
    return None


def qualified_name(value: str) -> str | None:
    """Why ``value`` is not a qualified name (a label or annotation key): an optional DNS
    subdomain prefix and '/', then at most 63 alphanumerics, '-', '_', '.'."""
    prefix, _, name = value.rpartition("/")
    if prefix and dns_subdomain(prefix):
        return f"prefix {prefix!r} must be a DNS-1123 subdomain"
    if not name or len(name) > 63 or not _QUALIFIED_NAME.match(name):
        return (
            "must be a qualified name: [prefix/]name, name at most 63 alphanumerics, '-', '_', '.'"
        )
    return None


def label_value(value: str) -> str | None:
    """Why ``value`` cannot be a label value."""
    if len(value) > 63 or not _LABEL_VALUE.match(value):
        return "must be a label value: at most 63 alphanumerics, '-', '_', '.', starting and ending alphanumeric"
    return None


def resource_name(value: str) -> str | None:
    """Why ``value`` cannot be a container resource: a GPU is an extended resource,
    ``<domain>/<name>`` outside ``kubernetes.io`` (``nvidia.com/gpu``)."""
    if value in _STANDARD_RESOURCES:
        return None
    prefix, slash, _ = value.partition("/")
    if not slash or qualified_name(value):
        return "must be an extended resource name '<domain>/<name>', e.g. 'nvidia.com/gpu'"
    if prefix == "kubernetes.io" or prefix.endswith(".kubernetes.io"):
        return "must not be in the kubernetes.io domain (it is reserved for the core resources)"
    return None


def quantity(value: Any) -> str | None:
    """Why ``value`` is not a resource quantity (``32Gi``, ``8``)."""
    if isinstance(value, int) and not isinstance(value, bool):
        return None
    if isinstance(value, str) and _QUANTITY.match(value):
        return None
    return "must be a quantity, e.g. 8 or '32Gi'"


def port_name(value: str) -> str | None:
    """Why ``value`` cannot name a port (IANA service name: at most 15 characters)."""
    if len(value) > 15 or not _PORT_NAME.match(value) or "--" in value:
        return "must be an IANA service name: at most 15 of a-z, 0-9, '-'"
    return None


def env_name(value: str) -> str | None:
    if not _ENV_NAME.match(value):
        return "must be an environment variable name"
    return None


def _labels(where: str, labels: dict[str, Any]) -> Iterator[str]:
    for key, value in labels.items():
        if why := qualified_name(key):
            yield f"{where}[{key!r}]: label key {why}"
        if why := label_value(str(value)):
            yield f"{where}[{key!r}]: label value {value!r} {why}"


def _metadata(where: str, meta: dict[str, Any]) -> Iterator[str]:
    if "name" in meta and (why := dns_subdomain(meta["name"])):
        yield f"{where}.name: {meta['name']!r} {why}"
    if "namespace" in meta and (why := dns_label(meta["namespace"])):
        yield f"{where}.namespace: {meta['namespace']!r} {why}"
    yield from _labels(f"{where}.labels", meta.get("labels") or {})
    for key in meta.get("annotations") or {}:
        if why := qualified_name(key):
            yield f"{where}.annotations[{key!r}]: key {why}"


def _container(where: str, c: dict[str, Any]) -> Iterator[str]:
    if why := dns_label(c.get("name", "")):
        yield f"{where}.name: {why}"
    for i, port in enumerate(c.get("ports") or ()):
        if "name" in port and (why := port_name(port["name"])):
            yield f"{where}.ports[{i}].name: {port['name']!r} {why}"
    for i, env in enumerate(c.get("env") or ()):
        if why := env_name(env.get("name", "")):
            yield f"{where}.env[{i}].name: {env.get('name')!r} {why}"
    for kind in ("limits", "requests"):
        for name, amount in ((c.get("resources") or {}).get(kind) or {}).items():
            if why := resource_name(name):
                yield f"{where}.resources.{kind}[{name!r}]: {why}"
            if why := quantity(amount):
                yield f"{where}.resources.{kind}[{name!r}]: {amount!r} {why}"


def _pod_spec(where: str, spec: dict[str, Any]) -> Iterator[str]:
    for i, c in enumerate(spec.get("containers") or ()):
        yield from _container(f"{where}.containers[{i}]", c)
    for i, v in enumerate(spec.get("volumes") or ()):
        if why := dns_label(v.get("name", "")):
            yield f"{where}.volumes[{i}].name: {why}"
        limit = (v.get("emptyDir") or {}).get("sizeLimit")
        if limit is not None and (why := quantity(limit)):
            yield f"{where}.volumes[{i}].emptyDir.sizeLimit: {limit!r} {why}"
    yield from _labels(f"{where}.nodeSelector", spec.get("nodeSelector") or {})


def problems(obj: dict[str, Any]) -> list[str]:
    """Every value in ``obj`` (a rendered object) the API server would refuse, one line
    each, ``<Kind>/<name>: <field path>: <why>``; the pod templates inside it included."""
    head = f"{obj.get('kind')}/{(obj.get('metadata') or {}).get('name')}"
    found = list(_metadata("metadata", obj.get("metadata") or {}))
    for path, template in pod_templates(obj):
        found += _metadata(f"{path}.metadata", template.get("metadata") or {})
        found += _pod_spec(f"{path}.spec", template.get("spec") or {})
    for i, port in (
        enumerate((obj.get("spec") or {}).get("ports") or ())
        if obj.get("kind") == "Service"
        else ()
    ):
        if "name" in port and (why := port_name(port["name"])):
            found.append(f"spec.ports[{i}].name: {port['name']!r} {why}")
    return [f"{head}: {line}" for line in found]


def pod_templates(obj: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """``(field path, PodTemplateSpec)`` of every pod template in a rendered object."""
    spec = obj.get("spec") or {}
    kind = obj.get("kind")
    if kind == "Deployment":
        return [("spec.template", spec["template"])]
    if kind == "LeaderWorkerSet":
        lwt = spec["leaderWorkerTemplate"]
        out = [("spec.leaderWorkerTemplate.workerTemplate", lwt["workerTemplate"])]
        if "leaderTemplate" in lwt:
            out.insert(0, ("spec.leaderWorkerTemplate.leaderTemplate", lwt["leaderTemplate"]))
        return out
    if kind == "AnalysisTemplate":
        return [
            (
                f"spec.metrics[{i}].provider.job.spec.template",
                m["provider"]["job"]["spec"]["template"],
            )
            for i, m in enumerate(spec.get("metrics") or ())
            if "job" in (m.get("provider") or {})
        ]
    return []
