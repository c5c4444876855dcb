"""tools/build.py: restating upstream replace directives, version stamping, cache keys."""

from __future__ import annotations

import importlib.util
import re
import sys
from pathlib import Path
from types import ModuleType

import pytest

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def build() -> ModuleType:
    spec = importlib.util.spec_from_file_location("toolchain_build", REPO / "tools" / "build.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def test_local_staging_replaces_become_published_versions(build: ModuleType) -> None:
    gomod = {
        "Require": [{"Path": "k8s.io/api", "Version": "v0.0.0"}],
        "Replace": [
            {"Old": {"Path": "k8s.io/api"}, "New": {"Path": "./staging/src/k8s.io/api"}},
            {"Old": {"Path": "github.com/x/y"}, "New": {"Path": "github.com/fork/y", "Version": "v1.2.3"}},
        ],
    }
    lines = build.restated_replaces(gomod, {"module": "k8s.io/kubernetes", "staging_version": "v0.36.3"})
    assert lines == ["k8s.io/api => k8s.io/api v0.36.3", "github.com/x/y => github.com/fork/y v1.2.3"]


def test_sibling_replaces_use_the_required_release(build: ModuleType) -> None:
    gomod = {
        "Require": [{"Path": "go.etcd.io/etcd/api/v3", "Version": "v3.6.16"}],
        "Replace": [
            {"Old": {"Path": "go.etcd.io/etcd/api/v3"}, "New": {"Path": "../api"}},
            {"Old": {"Path": "go.etcd.io/etcd"}, "New": {"Path": "./FORBIDDEN_DEPENDENCY"}},
        ],
    }
    assert build.restated_replaces(gomod, {"module": "go.etcd.io/etcd/server/v3"}) == [
        "go.etcd.io/etcd/api/v3 => go.etcd.io/etcd/api/v3 v3.6.16"
    ]


def test_local_replace_without_known_version_is_an_error(build: ModuleType) -> None:
    gomod = {"Replace": [{"Old": {"Path": "example.com/a"}, "New": {"Path": "../a"}}]}
    with pytest.raises(SystemExit, match=re.escape("example.com/a")):
        build.restated_replaces(gomod, {"module": "example.com/root"})


def test_kubernetes_binaries_are_stamped_with_their_release(build: ModuleType) -> None:
    pins = build.load_pins()
    flags = build.ldflags(pins["kubernetes"], pins)
    version = pins["kubernetes"]["version"]
    assert f"-X k8s.io/component-base/version.gitVersion={version}" in flags
    assert "gitMinor=36" in flags


def test_every_pin_has_a_version_and_packages(build: ModuleType) -> None:
    for name, pin in build.load_pins().items():
        assert pin["version"].startswith("v"), name
        assert pin["packages"], name
