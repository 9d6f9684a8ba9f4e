"""The operator's one options object: the environment is read when asked, never at import."""

from __future__ import annotations

import os
import subprocess
import sys
from typing import Any

import pytest

from preheat.operator.options import (
    DEFAULT_SELECTOR,
    OperatorConfigError,
    OperatorOptions,
    options_from_env,
    parse_config,
)


def test_with_env_sets_the_periods_and_the_autoscaler() -> None:
    options = OperatorOptions().with_env(
        {
            "PREHEAT_OPERATOR_RESYNC_S": "7",
            "PREHEAT_OPERATOR_WORKER_TIMEOUT_S": "2.5",
            "PREHEAT_AUTOSCALER_INTERVAL_S": "3",
            "PREHEAT_PROMETHEUS_URL": "http://prometheus:9090",
        }
    )
    assert (options.resync_s, options.worker_timeout_s) == (7.0, 2.5)
    assert options.autoscaler.interval_s == 3.0
    assert options.autoscaler.prometheus_url == "http://prometheus:9090"
    assert options.autoscaler.prometheus_selector == DEFAULT_SELECTOR
    defaults = OperatorOptions().with_env({})
    assert (defaults.resync_s, defaults.worker_timeout_s) == (60.0, 5.0)


def test_importing_the_handlers_reads_no_environment() -> None:
    """A bad value in the environment fails where the options are built, not at import
    (a fresh interpreter: the handlers register themselves with kopf once per process)."""
    env = {**os.environ, "PREHEAT_OPERATOR_RESYNC_S": "not a number"}
    code = "import preheat.operator.handlers, preheat.operator.main"
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, timeout=120)
    assert done.returncode == 0, done.stderr.decode()
    with pytest.raises(ValueError, match="PREHEAT_OPERATOR_RESYNC_S must be a number"):
        options_from_env({"PREHEAT_OPERATOR_RESYNC_S": "not a number"})


def test_worker_service_monitor_labels_must_be_a_mapping_of_strings() -> None:
    build, _, _ = parse_config({"workerServiceMonitorLabels": {"release": "kps"}})
    assert build.service_monitor_labels == {"release": "kps"}
    with pytest.raises(OperatorConfigError, match="workerServiceMonitorLabels must map"):
        parse_config({"workerServiceMonitorLabels": ["release"]})


def test_worker_pod_settings_are_read_and_checked_with_the_pools_rules() -> None:
    build, _, _ = parse_config(
        {"workerPod": {"imagePullSecrets": [{"name": "regcred"}], "runtimeClassName": "nvidia"}}
    )
    assert build.worker_pod.image_pull_secrets == ("regcred",)
    assert build.worker_pod.runtime_class == "nvidia"
    with pytest.raises(OperatorConfigError) as err:
        parse_config(
            {
                "workerPod": {
                    "env": [{"name": "POD_NAME", "value": "x"}],
                    "runtimeClass": "typo",
                }
            }
        )
    assert "workerPod.env: POD_NAME is set by the operator" in err.value.message
    assert "workerPod.runtimeClass: unknown field" in err.value.message


def test_worker_network_policy_settings_are_checked() -> None:
    build, _, _ = parse_config(
        {"workerNetworkPolicy": {"enabled": True, "controlPlaneNamespace": "preheat"}}
    )
    assert build.network_policy.enabled
    with pytest.raises(OperatorConfigError) as err:
        parse_config({"workerNetworkPolicy": {"enabled": "yes", "from": []}})
    assert "workerNetworkPolicy: unknown key 'from'" in err.value.message
    assert "workerNetworkPolicy.enabled must be true or false" in err.value.message


def test_the_config_files_autoscaler_section_wins_over_the_environment(tmp_path: Any) -> None:
    """Operator issue, item 6: the autoscaler's Prometheus settings are operator config (the
    chart renders them there), not only environment variables."""
    config = tmp_path / "operator.yaml"
    config.write_text(
        "autoscaler:\n"
        "  prometheusUrl: http://prometheus.monitoring:9090\n"
        '  routerSelector: namespace="{namespace}",pool="{pool}"\n'
        "  selector: ''\n"
        "  intervalSeconds: 5\n"
    )
    env = {
        "PREHEAT_OPERATOR_CONFIG": str(config),
        "PREHEAT_PROMETHEUS_URL": "http://old:9090",
        "PREHEAT_PROMETHEUS_SELECTOR": 'job="workers"',
    }
    auto = options_from_env(env).autoscaler
    assert auto.prometheus_url == "http://prometheus.monitoring:9090"
    assert auto.prometheus_router_selector == 'namespace="{namespace}",pool="{pool}"'
    assert auto.prometheus_selector == 'job="workers"'  # "" in the file: the env's holds
    assert auto.interval_s == 5.0


def test_bad_autoscaler_settings_are_refused_all_at_once() -> None:
    with pytest.raises(OperatorConfigError) as err:
        parse_config(
            {"autoscaler": {"prometheusUrl": "prometheus:9090", "intervalSeconds": 0, "x": 1}}
        )
    message = str(err.value)
    assert "autoscaler: unknown key 'x'" in message
    assert "prometheusUrl must be an http(s) URL" in message
    assert "intervalSeconds must be a number > 0" in message
