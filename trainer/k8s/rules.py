"""The Kubernetes API server's own rules for names and values, as small pure functions.

Each function returns a list of problems (empty when the value is fine), phrased for the
user with the fix, so callers can collect every problem into one error (trainer.core.errors.collect).
The API server would refuse every value rejected here, usually after training has finished;
checking them here moves that failure to the first second of a run. The rules follow
k8s.io/apimachinery/pkg/util/validation (names, labels), resource.Quantity (quantities) and
k8s.io/kubernetes/pkg/apis/core/validation (tolerations, node selectors); cron expressions
follow the parser KFP's ScheduledWorkflow controller uses (github.com/robfig/cron v1).

Used by pipelines.submit, pipelines.run_local, the validate-params component, --dry-run,
trainer launch-k8s / deploy-k8s and pipelines.manifests: one set of rules for every caller.
"""

from __future__ import annotations

import json
import math
import re
from typing import Any

DNS1123_LABEL_MAX = 63
DNS1123_SUBDOMAIN_MAX = 253
LABEL_VALUE_MAX = 63
TOLERATION_OPERATORS = ("Equal", "Exists")
TAINT_EFFECTS = ("NoSchedule", "PreferNoSchedule", "NoExecute")
TOLERATION_KEYS = ("key", "operator", "value", "effect", "tolerationSeconds")

_LABEL = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?"
_DNS1123_LABEL = re.compile(_LABEL)
_DNS1123_SUBDOMAIN = re.compile(rf"{_LABEL}(\.{_LABEL})*")
_DNS1035_LABEL = re.compile(r"[a-z]([-a-z0-9]*[a-z0-9])?")
_QUALIFIED_NAME = re.compile(r"([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]")
# resource.Quantity: a signed decimal number, then an optional suffix (binary SI, decimal SI
# or a decimal exponent).
_QUANTITY = re.compile(r"([+-]?)([0-9]+(\.[0-9]*)?|\.[0-9]+)(Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE]|[eE][+-]?[0-9]+)?")


def suggest_name(value: str, max_len: int = DNS1123_LABEL_MAX, letter_first: bool = False) -> str:
    """A valid name close to `value` (lowercased, other characters to '-'), for messages."""
    slug = re.sub(r"[^a-z0-9-]+", "-", str(value).lower()).strip("-")
    if letter_first:
        slug = re.sub(r"^[^a-z]+", "", slug)
    return slug[:max_len].rstrip("-") or "my-name"


def _length(value: str, max_len: int) -> str:
    return f" (it has {len(value)} characters)" if len(value) > max_len else ""


def _is_str(value: Any, what: str) -> list[str]:
    if not isinstance(value, str):
        return [f"{what} must be a string, got {value!r} ({type(value).__name__}); quote it"]
    return []


def dns1123_label(value: Any, what: str) -> list[str]:
    """Namespaces, most object names: lowercase alphanumerics and '-', at most 63 characters."""
    if p := _is_str(value, what):
        return p
    if not value:
        return [f"{what} is empty: give a name of lowercase letters, digits and '-' (e.g. 'llm-finetune')"]
    if len(value) > DNS1123_LABEL_MAX or not _DNS1123_LABEL.fullmatch(value):
        return [
            f"{what}={value!r} is not a valid Kubernetes name (RFC 1123 label)"
            f"{_length(value, DNS1123_LABEL_MAX)}: use at most "
            f"{DNS1123_LABEL_MAX} lowercase letters, digits and '-', starting and ending with a letter "
            f"or digit (e.g. {suggest_name(value)!r})"
        ]
    return []


# The control plane's own namespaces: a job, a server or the Secrets they read has no place there
# (the API server accepts them, and a cluster admin's RBAC may too).
SYSTEM_NAMESPACES = ("kube-system", "kube-public", "kube-node-lease")


def namespace(value: Any, what: str = "namespace") -> list[str]:
    """A namespace the project may create objects in: an RFC 1123 label, not a system namespace."""
    if p := dns1123_label(value, what):
        return p
    if value in SYSTEM_NAMESPACES:
        return [
            f"{what}={value!r} is a Kubernetes system namespace, kept for the cluster's own components: use "
            "the project's namespace (e.g. 'llm-finetune') or your Kubeflow profile's"
        ]
    return []


def dns1123_subdomain(value: Any, what: str) -> list[str]:
    """Service accounts, Secrets, ConfigMaps, LocalQueues: RFC 1123 labels joined by '.', <= 253."""
    if p := _is_str(value, what):
        return p
    if not value:
        return [f"{what} is empty: give a name of lowercase letters, digits, '-' and '.'"]
    if len(value) > DNS1123_SUBDOMAIN_MAX or not _DNS1123_SUBDOMAIN.fullmatch(value):
        return [
            f"{what}={value!r} is not a valid Kubernetes name (RFC 1123 subdomain)"
            f"{_length(value, DNS1123_SUBDOMAIN_MAX)}: "
            f"use at most "
            f"{DNS1123_SUBDOMAIN_MAX} lowercase letters, digits, '-' and '.', each part starting and ending "
            f"with a letter or digit (e.g. {suggest_name(value, DNS1123_SUBDOMAIN_MAX)!r})"
        ]
    return []


def dns1035_label(value: Any, what: str, max_len: int = DNS1123_LABEL_MAX) -> list[str]:
    """Service names (and so served model names): like a label, but starting with a letter."""
    if p := _is_str(value, what):
        return p
    if not value:
        return [f"{what} is empty: give a name like 'my-model' (lowercase letters, digits and '-')"]
    if len(value) > max_len or not _DNS1035_LABEL.fullmatch(value):
        return [
            f"{what}={value!r} is not a valid Kubernetes Service name (RFC 1035 label){_length(value, max_len)}: "
            f"use at most {max_len} "
            f"lowercase letters, digits and '-', starting with a letter and ending with a letter or digit "
            f"(e.g. {suggest_name(value, max_len, letter_first=True)!r})"
        ]
    return []


def label_key(key: Any, what: str) -> list[str]:
    """`[prefix/]name`: prefix a DNS subdomain, name <= 63 of alphanumerics, '-', '_', '.'."""
    if p := _is_str(key, what):
        return p
    prefix, _, name = key.rpartition("/")
    problems = []
    if "/" in key and (not prefix or dns1123_subdomain(prefix, "prefix")):
        problems.append(f"{what} {key!r}: the prefix before '/' must be a DNS subdomain such as 'example.com'")
    if not name or len(name) > LABEL_VALUE_MAX or not _QUALIFIED_NAME.fullmatch(name):
        problems.append(
            f"{what} {key!r} is not a valid label key: the name part must be 1-{LABEL_VALUE_MAX} "
            f"letters, digits, '-', '_' or '.', starting and ending with a letter or digit "
            f"(e.g. 'cloud.google.com/gke-accelerator' or 'pool')"
        )
    return problems


def label_value(value: Any, what: str) -> list[str]:
    """Empty, or <= 63 letters, digits, '-', '_', '.', starting and ending alphanumeric."""
    if not isinstance(value, str):
        # written as the JSON the user typed: true, not Python's True (labels such as "true" are lower case)
        text = json.dumps(value) if isinstance(value, (bool, int, float)) or value is None else str(value)
        return [
            f"{what} must be a string, got {text} ({type(value).__name__}): quote it, e.g. "
            f"{{\"pool\": \"{text}\"}} (Kubernetes label values are strings)"
        ]
    if value and (len(value) > LABEL_VALUE_MAX or not _QUALIFIED_NAME.fullmatch(value)):
        return [
            f"{what}={value!r} is not a valid label value{_length(value, LABEL_VALUE_MAX)}: "
            f"use at most {LABEL_VALUE_MAX} letters, digits, "
            f"'-', '_' or '.', starting and ending with a letter or digit"
        ]
    return []


def node_selector(selector: Any, what: str = "node_selector") -> list[str]:
    """A JSON object of label key -> label value (both strings)."""
    if not isinstance(selector, dict):
        return [
            f"{what} must be a JSON object of label -> value, e.g. "
            f'{{"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}}, got {selector!r}'
        ]
    problems = []
    for k, v in selector.items():
        problems += label_key(k, f"{what} key")
        problems += label_value(v, f"{what}[{k!r}]")
    return problems


def tolerations(items: Any, what: str = "tolerations") -> list[str]:
    """A list of Toleration objects as the API server validates them."""
    if not isinstance(items, list):
        return [
            f"{what} must be a JSON list of objects like "
            f'{{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}}, got {items!r}'
        ]
    problems = []
    for i, t in enumerate(items):
        w = f"{what}[{i}]"
        if not isinstance(t, dict):
            problems.append(f"{w} must be an object with key/operator/value/effect, got {t!r}")
            continue
        unknown = sorted(set(t) - set(TOLERATION_KEYS))
        if unknown:
            problems.append(f"{w} has unknown field(s) {unknown}: use only {list(TOLERATION_KEYS)}")
        op = t.get("operator", "Equal") or "Equal"
        if op not in TOLERATION_OPERATORS:
            problems.append(
                f"{w}.operator={op!r} is not allowed: use 'Equal' (key and value match) or 'Exists' (any value)"
            )
        key = t.get("key", "")
        if key:
            problems += label_key(key, f"{w}.key")
        elif op != "Exists":
            problems.append(f"{w}: an empty key needs operator 'Exists' (it then tolerates every taint)")
        value = t.get("value", "")
        if op == "Exists" and value:
            problems.append(f"{w}: operator 'Exists' takes no value (got {value!r}); drop the value or use 'Equal'")
        elif op == "Equal" and value:
            problems += label_value(value, f"{w}.value")
        effect = t.get("effect", "")
        if effect and effect not in TAINT_EFFECTS:
            problems.append(
                f"{w}.effect={effect!r} is not allowed: use one of {list(TAINT_EFFECTS)} "
                f"or leave it empty (all effects)"
            )
        if "tolerationSeconds" in t:
            secs = t["tolerationSeconds"]
            # 5.0 is fine: KFP hands JSON numbers in lists over as floats.
            if isinstance(secs, bool) or not (isinstance(secs, int) or (isinstance(secs, float) and secs.is_integer())):
                problems.append(f"{w}.tolerationSeconds must be an integer number of seconds, got {secs!r}")
            if effect != "NoExecute":
                problems.append(f"{w}: tolerationSeconds applies only to effect 'NoExecute'")
    return problems


def non_negative_int(value: Any, what: str, minimum: int = 0) -> list[str]:
    """Counts (GPUs, replicas, restarts): a whole number >= minimum; bools and floats are refused."""
    if isinstance(value, bool) or not isinstance(value, int):
        return [f"{what} must be a whole number >= {minimum}, got {value!r}"]
    if value < minimum:
        return [f"{what} must be >= {minimum}, got {value}"]
    return []


def quantity(value: Any, what: str, integer: bool = False) -> list[str]:
    """A non-negative resource.Quantity ('8', '500m', '64Gi'); `integer` for extended resources
    such as GPUs, which Kubernetes only accepts as whole numbers."""
    if isinstance(value, bool):
        return [f"{what} must be a quantity such as '8', '500m' or '64Gi', got {value!r}"]
    if isinstance(value, (int, float)):
        if isinstance(value, float) and not math.isfinite(value):
            return [f"{what} must be a finite quantity such as '8' or '64Gi', got {value!r}"]
        value = str(value)
    if not isinstance(value, str) or not _QUANTITY.fullmatch(value.strip()) or value != value.strip():
        return [
            f"{what}={value!r} is not a Kubernetes quantity: use a number with an optional unit, "
            f"e.g. '8', '500m' (CPU), '64Gi' (memory)"
        ]
    from kubernetes.utils import parse_quantity

    amount = parse_quantity(value)  # the grammar is checked above: the client's parser is lenient ('1K')
    if amount < 0:
        return [f"{what}={value!r} must not be negative"]
    if integer and amount != amount.to_integral_value():
        return [f"{what}={value!r} must be a whole number (extended resources such as GPUs cannot be fractional)"]
    return []


def resource_name(value: Any, what: str) -> list[str]:
    """An extended resource name such as nvidia.com/gpu (a domain-prefixed qualified name)."""
    if p := _is_str(value, what):
        return p
    if "/" not in value or label_key(value, what):
        return [f"{what}={value!r} must look like vendor/resource, e.g. 'nvidia.com/gpu', 'amd.com/gpu'"]
    return []


def service_account_ref(value: Any, what: str) -> list[str]:
    """`namespace:name` naming a ServiceAccount in another namespace."""
    if p := _is_str(value, what):
        return p
    ns, sep, name = value.partition(":")
    if not sep or not ns or not name:
        return [f"{what}={value!r} must be namespace:name, e.g. 'kubeflow:pipeline-runner'"]
    return dns1123_label(ns, f"{what} namespace") + dns1123_subdomain(name, f"{what} name")


# --- cron, as KFP recurring runs read it -------------------------------------------------
# KFP's ScheduledWorkflow controller parses `cron` with robfig/cron v1 `cron.Parse`: six fields,
# seconds first. That parser also takes five fields, read as second..month with any weekday,
# which silently shifts a crontab line by one field (crontab's '0 9 * * 1', 09:00 on Mondays,
# would run at minute 9 of every hour in January); so five fields are refused with the
# six-field spelling instead.
CRON_FORMAT = "a 6-field cron: second minute hour day-of-month month day-of-week, e.g. '0 0 3 * * *' (03:00 daily)"
_CRON_DESCRIPTORS = ("@yearly", "@annually", "@monthly", "@weekly", "@daily", "@midnight", "@hourly")
# robfig/cron knows numbers, * ? , / - and month/weekday names; not croniter's L, W, # or H.
_CRON_NAMES = re.compile(r"JAN|FEB|MAR|APR|MAY|JUN|JUL|AUG|SEP|OCT|NOV|DEC|SUN|MON|TUE|WED|THU|FRI|SAT", re.I)
_CRON_FIELD = re.compile(r"[0-9*?,/-]+")
_GO_DURATION = re.compile(r"([0-9]+(\.[0-9]+)?(ns|us|µs|ms|s|m|h))+")
_GO_DURATION_PART = re.compile(r"([0-9]+(?:\.[0-9]+)?)(ns|us|µs|ms|s|m|h)")


def cron(expr: Any, what: str = "cron") -> list[str]:
    """A KFP recurring-run schedule: six fields with seconds first, or a descriptor (@daily,
    @every 1h30m). Field values are checked by croniter (ranges, names, steps)."""
    if p := _is_str(expr, what):
        return p
    expr = expr.strip()  # the caller sends it stripped (pipelines.submit)
    if expr in _CRON_DESCRIPTORS:
        return []
    if expr.startswith("@every"):
        if not expr.startswith("@every ") or expr.startswith("@every  "):
            return [f"{what}={expr!r}: write one space after @every, e.g. '@every 6h' (robfig/cron's form)"]
        duration = expr[len("@every ") :]
        if _GO_DURATION.fullmatch(duration):
            seconds = every_seconds(expr)
            if seconds < 1:  # robfig/cron rounds it up to one second: a new run every second
                return [
                    f"{what}={expr!r} is shorter than a second (KFP would start a run every second): "
                    "give a real interval, e.g. '@every 6h'"
                ]
            return []
        days = " (Go durations stop at hours: '@every 24h' for a day)" if re.search(r"[0-9]d", duration) else ""
        return [f"{what}={expr!r}: @every takes a duration like '@every 6h' or '@every 1h30m'{days}"]
    if expr.lower() in _CRON_DESCRIPTORS:  # robfig/cron matches descriptors case-sensitively
        return [f"{what}={expr!r}: write descriptors in lower case, e.g. {expr.lower()!r}"]
    fields = expr.split()
    if len(fields) != 6:
        hint = ""
        if len(fields) == 5:
            hint = f" (a 5-field crontab line gains a leading seconds field: '0 {expr}')"
        return [f"{what}={expr!r} has {len(fields)} field(s); KFP recurring runs take {CRON_FORMAT}{hint}"]
    from croniter import croniter

    bad = [f for f in fields if not _CRON_FIELD.fullmatch(_CRON_NAMES.sub("0", f))]
    if bad or not croniter.is_valid(expr, second_at_beginning=True):
        return [
            f"{what}={expr!r} is not a valid cron expression; KFP recurring runs take {CRON_FORMAT} "
            f"(ranges: second/minute 0-59, hour 0-23, day 1-31, month 1-12 or JAN-DEC, weekday 0-6 or SUN-SAT)"
        ]
    return []


# robfig/cron's bounds per field (KFP's parser): croniter, which checks the syntax, also takes
# weekday 7 and day 0, which KFP refuses only after the upload.
_CRON_BOUNDS = (
    ("second", 0, 59),
    ("minute", 0, 59),
    ("hour", 0, 23),
    ("day-of-month", 1, 31),
    ("month", 1, 12),
    ("day-of-week", 0, 6),
)
MIN_INTERVAL_S = 60  # a pipeline run takes minutes: more than one a minute is a seconds field misread


def every_seconds(expr: str) -> float:
    """The interval of an '@every <Go duration>' schedule, in seconds."""
    units = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1, "m": 60, "h": 3600}
    return sum(float(n) * units[u] for n, u in _GO_DURATION_PART.findall(expr.strip()[len("@every ") :]))


def schedule(expr: Any, what: str = "schedule") -> list[str]:
    """A recurring run's schedule: `cron()`'s syntax, then what a valid expression still gets
    wrong: a field value out of robfig/cron's range, no date it ever fires on, or runs more often
    than once a minute (usually '*' typed in the seconds field, as in a crontab line with a field
    added at the end)."""
    if problems := cron(expr, what):
        return problems
    expr = expr.strip()
    if expr.startswith("@every "):
        if (seconds := every_seconds(expr)) < MIN_INTERVAL_S:
            return [
                f"{what}={expr!r} starts a run every {seconds:g}s, before a pipeline run could end: "
                "give at least a minute, e.g. '@every 6h'"
            ]
        return []
    if expr.startswith("@"):
        return []
    from datetime import datetime, timezone

    from croniter import CroniterBadDateError, croniter

    for value, (name, low, high) in zip(expr.split(), _CRON_BOUNDS):
        names = _CRON_NAMES.sub("", value) != value
        numbers = [int(n) for part in value.split(",") for n in re.findall(r"\d+", part.split("/")[0])]
        if not names and any(not low <= n <= high for n in numbers):
            return [
                f"{what}={expr!r}: the {name} field {value!r} is out of range {low}-{high} (KFP's "
                "cron" + (": Sunday is 0" if name == "day-of-week" else "") + ")"
            ]
    it = croniter(expr, datetime(2026, 1, 5, tzinfo=timezone.utc), second_at_beginning=True)
    try:
        times = [it.get_next(float) for _ in range(4)]
    except CroniterBadDateError:  # a day the month never has, e.g. 30 2 (KFP would accept it and wait forever)
        return [
            f"{what}={expr!r} never starts a run: no date matches its day-of-month, month and "
            "day-of-week fields together (e.g. February 30); fix the day or the month"
        ]
    gap = min(b - a for a, b in zip(times, times[1:]))
    if gap < MIN_INTERVAL_S:
        return [
            f"{what}={expr!r} starts a run every {gap:g}s: KFP's first cron field is seconds "
            "(e.g. '0 */5 * * * *' is every 5 minutes, '0 0 3 * * *' daily at 03:00); give at least a minute "
            "between runs"
        ]
    return []


# --- whole objects ------------------------------------------------------------------------
# Messages use the pipeline parameter names (kueue_queue, max_restarts), which the CLIs'
# flags mirror (--queue, --max-restarts).


def served_model_name(value: Any, what: str = "served_model_name") -> list[str]:
    """The vLLM Deployment, its Service and the OpenAI model name are all this name; a Service
    name is an RFC 1035 label, so that is the rule."""
    return dns1035_label(value, what)


# KServe names the predictor's host `<name>-predictor-<namespace>` (its default ingress domain
# template), one DNS label, so name and namespace share 63 characters: a longer pair is accepted by
# the API server and then never becomes Ready (kserve/kserve#4807).
KSERVE_HOST_INFIX = "-predictor-"


def kserve_name(name: Any, namespace: str, what: str = "served_model_name", suffix: str = "") -> list[str]:
    """An InferenceService named `name` + `suffix` in `namespace` (empty: not known yet, only the
    name is checked); the room named in the fix is for `name`, the value the user gives."""
    if p := dns1035_label(name, what):
        return p
    host = f"{name}{suffix}{KSERVE_HOST_INFIX}{namespace}"
    if namespace and len(host) > DNS1123_LABEL_MAX:
        room = DNS1123_LABEL_MAX - len(KSERVE_HOST_INFIX) - len(namespace) - len(suffix)
        return [
            f"{what}={name!r} is too long for KServe in namespace {namespace!r}: the predictor's host name "
            f"{host!r} has {len(host)} characters, at most {DNS1123_LABEL_MAX} allowed; use a name of at most "
            f"{room} characters (e.g. {suggest_name(name, max(room, 1), letter_first=True)!r})"
            if room > 0
            else f"namespace {namespace!r} is too long for KServe: '<name>{suffix}{KSERVE_HOST_INFIX}"
            f"{namespace}' must fit in {DNS1123_LABEL_MAX} characters; deploy into a shorter namespace"
        ]
    return []


# Kubernetes mounts the pod's own namespace here (with its service-account token).
POD_NAMESPACE_FILE = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"


def pod_namespace() -> str:
    """The namespace of the pod this runs in ('' outside a pod): the namespace a deploy with
    namespace="" uses (the run's profile namespace, known only once the run's pods exist)."""
    try:
        with open(POD_NAMESPACE_FILE, encoding="utf-8") as f:
            return f.read().strip()
    except OSError:
        return ""


def deploy_name(
    name: Any, backend: str, namespace: str = "", side_by_side: bool = False, what: str = "served_model_name"
) -> list[str]:
    """The name a cluster deploy gives its objects, checked before training: served_model_name,
    or `<name>-base` when the base model is served beside adapters (serve_adapters, the sweep's
    deploy_all_trials); for KServe also its predictor's host name."""
    if p := dns1035_label(name, what):
        return p
    full = f"{name}-base" if side_by_side else name
    if len(full) > DNS1123_LABEL_MAX:
        return [
            f"{what}={name!r} has {len(name)} characters: served beside its adapters the base model is "
            f"{full!r}, a Service name of at most {DNS1123_LABEL_MAX}; use at most "
            f"{DNS1123_LABEL_MAX - len('-base')} characters"
        ]
    return kserve_name(name, namespace, what, full[len(name) :]) if backend == "kserve" else []


def cluster_spec_problems(spec: Any) -> list[str]:
    """Every API-server rule for a trainer.k8s.podspec.ClusterSpec (attribute access only, so
    this module stays free of imports from the rest of the project)."""
    p = []
    if spec.namespace:
        p += namespace(spec.namespace)
    if spec.accelerator_resource:
        p += resource_name(spec.accelerator_resource, "accelerator_resource")
    for name in ("cpu", "memory", "shm_size", "cache_size"):
        if hasattr(spec, name):
            p += quantity(getattr(spec, name), name)
    p += node_selector(spec.node_selector, "node_selector")
    p += tolerations(spec.tolerations, "tolerations")
    if spec.queue:
        p += label_value(spec.queue, "kueue_queue") or dns1123_subdomain(spec.queue, "kueue_queue")
    if spec.service_account:
        p += dns1123_subdomain(spec.service_account, "service_account")
    for name, what, minimum in (
        ("nodes", "nodes", 1),
        ("procs_per_node", "procs_per_node", 1),
        ("backoff_limit", "max_restarts", 0),
        ("termination_grace_s", "termination_grace_s", 0),
        ("ttl_seconds_after_finished", "ttl_seconds_after_finished", 0),
        ("wait_timeout_s", "wait_timeout_s", 0),
    ):
        if hasattr(spec, name):
            value = getattr(spec, name)
            # Below-minimum values are the topology checks' to report; here only the type.
            if isinstance(value, bool) or not isinstance(value, int):
                p += non_negative_int(value, what, minimum)
    poll = getattr(spec, "poll_interval_s", 1.0)
    if isinstance(poll, float) and not math.isfinite(poll):
        p.append(f"poll_interval_s must be a finite number of seconds, got {poll}")
    return p


# The image reference grammar (distribution/reference, what the kubelet and every registry parse):
# [domain[:port]/]path[:tag][@digest], path components lower case separated by '.', '_', '__' or dashes.
_DOMAIN = r"(?:[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9])(?:\.(?:[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9]))*(?::[0-9]+)?"
_COMPONENT = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
_IMAGE = re.compile(
    rf"(?:{_DOMAIN}/)?{_COMPONENT}(?:/{_COMPONENT})*(?::[\w][\w.-]{{0,127}})?"
    r"(?:@[A-Za-z][A-Za-z0-9]*(?:[-_+.][A-Za-z][A-Za-z0-9]*)*:[0-9a-fA-F]{32,})?"
)
_DIGEST_HEX = {"sha256": 64, "sha512": 128}


def pinned_image(value: Any, what: str, example: str) -> list[str]:
    """An image reference by the registry's grammar (`image_reference`), then pinned by a tag that is not :latest
    (or a digest): a pod restarted on another node must run the same image."""
    if grammar := image_reference(value, what):
        return grammar  # before the tag rule: "x:v0.1 --trust-remote-code" has a tag, and is no image
    if "@" not in value and (":" not in value.rsplit("/", 1)[-1] or value.endswith(":latest")):
        return [f"{what}={value!r} must be pinned by tag, e.g. {example} (not :latest)"]
    return []


def image_reference(value: Any, what: str) -> list[str]:
    """A container image reference by the registry's grammar: no spaces or newlines, a path in lower case,
    a tag of at most 128 characters, a digest of the algorithm's full length."""
    if not isinstance(value, str):
        return [f"{what} must be a string, got {type(value).__name__}"]
    shown = json.dumps(value)
    if not value or any(c.isspace() for c in value):
        return [
            f"{what}={shown} is not an image reference: it holds white space (a flag or a second word "
            "does not belong in it); give registry/path:tag, e.g. vllm/vllm-openai:v0.32.0"
        ]
    if not _IMAGE.fullmatch(value):
        return [
            f"{what}={shown} is not an image reference (registry/path:tag or path@sha256:<64 hex digits>, the "
            "path in lower case): check it, e.g. vllm/vllm-openai:v0.32.0"
        ]
    if "@" in value:
        algorithm, _, hex_digits = value.rsplit("@", 1)[1].partition(":")
        if algorithm in _DIGEST_HEX and len(hex_digits) != _DIGEST_HEX[algorithm]:
            return [
                f"{what}={shown}: a {algorithm} digest has {_DIGEST_HEX[algorithm]} hex digits, this one "
                f"{len(hex_digits)}: copy the whole digest"
            ]
        if algorithm in _DIGEST_HEX and hex_digits != hex_digits.lower():  # registries refuse upper case (OCI)
            return [
                f"{what}={shown}: a {algorithm} digest is '{algorithm}:' and {_DIGEST_HEX[algorithm]} lower-case "
                "hex digits: copy the digest as the registry prints it"
            ]
    return []
