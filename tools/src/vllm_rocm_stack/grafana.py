"""Grafana provisioning for the dashboard: a Prometheus datasource and a file provider that loads the chart's
dashboard JSON. One writer for both places a Grafana reads it from: `make run`'s work directory (generated, pointing
at the local Prometheus) and docker/grafana/provisioning (checked in, pointing at the compose service; written by
`make generate`, vllm_rocm_stack.generate)."""

from __future__ import annotations

import shutil
from pathlib import Path

import yaml

from .config import DASHBOARD_JSON as JSON_PATH
from .config import DASHBOARD_UID as UID

DATASOURCE_UID = "prometheus"
FOLDER = "vLLM on ROCm"


def datasource_yaml(prometheus_url: str) -> str:
    return yaml.safe_dump(
        {
            "apiVersion": 1,
            "datasources": [
                {
                    "name": "Prometheus",
                    "uid": DATASOURCE_UID,
                    "type": "prometheus",
                    "access": "proxy",
                    "url": prometheus_url,
                    "isDefault": True,
                    "editable": False,
                }
            ],
        },
        sort_keys=False,
    )


def dashboards_yaml(dashboards_dir: str) -> str:
    return yaml.safe_dump(
        {
            "apiVersion": 1,
            "providers": [
                {
                    "name": UID,
                    "folder": FOLDER,
                    "type": "file",
                    "disableDeletion": True,
                    "allowUiUpdates": False,
                    "updateIntervalSeconds": 30,
                    "options": {"path": dashboards_dir},
                }
            ],
        },
        sort_keys=False,
    )


def write_provisioning(root: Path, prometheus_url: str) -> Path:
    """Write root/provisioning/{datasources,dashboards}/ and root/dashboards/vllm-rocm.json; return the
    provisioning directory (what GF_PATHS_PROVISIONING names)."""
    prov, boards = root / "provisioning", root / "dashboards"
    (prov / "datasources").mkdir(parents=True, exist_ok=True)
    (prov / "dashboards").mkdir(parents=True, exist_ok=True)
    boards.mkdir(parents=True, exist_ok=True)
    (prov / "datasources" / "prometheus.yaml").write_text(datasource_yaml(prometheus_url))
    (prov / "dashboards" / "vllm-rocm.yaml").write_text(dashboards_yaml(str(boards.resolve())))
    shutil.copyfile(JSON_PATH, boards / JSON_PATH.name)
    return prov
