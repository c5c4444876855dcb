"""tools/build.py: restating upstream replace directives, version stamping, cache keys, progress and logs."""

from __future__ import annotations

import importlib.util
import io
import json
import re
import shutil
import subprocess
import sys
import zipfile
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


# -- progress and build logs, against a local module proxy (no network) ------------------------

HELLO = """package main

import "fmt"

var version = "unset"

func main() { fmt.Println("hello", version) }
"""

FAKE_PINS = """
[hello]
module = "example.com/hello"
version = "v1.0.0"
packages = ["cmd/hello", "cmd/hi"]
binary_names = { "cmd/hi" = "hey" }
ldflags = ["-X main.version={version}"]

[broken]
module = "example.com/broken/v2"
version = "v2.0.1"
packages = ["."]
binary_names = { "." = "broken" }
"""


def publish(proxy: Path, module: str, version: str, files: dict[str, str]) -> None:
    """A module version in the layout GOPROXY=file://... serves."""
    folder = proxy / module / "@v"
    folder.mkdir(parents=True, exist_ok=True)
    gomod = f"module {module}\n\ngo 1.22\n"
    (folder / "list").write_text(f"{version}\n")
    (folder / f"{version}.info").write_text(json.dumps({"Version": version, "Time": "2026-01-01T00:00:00Z"}))
    (folder / f"{version}.mod").write_text(gomod)
    with zipfile.ZipFile(folder / f"{version}.zip", "w") as archive:
        for name, text in {"go.mod": gomod, **files}.items():
            archive.writestr(f"{module}@{version}/{name}", text)


@pytest.fixture
def fake_toolchain(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Pins of two tiny tools served by a local proxy: `hello` builds, `broken` does not compile."""
    proxy = tmp_path / "proxy"
    publish(proxy, "example.com/hello", "v1.0.0", {"cmd/hello/main.go": HELLO, "cmd/hi/main.go": HELLO})
    publish(proxy, "example.com/broken/v2", "v2.0.1", {"main.go": "package main\n\nfunc main() { undefinedCall() }\n"})
    monkeypatch.setenv("GOPROXY", f"file://{proxy}")
    monkeypatch.setenv("GOSUMDB", "off")
    monkeypatch.setenv("GOMODCACHE", str(tmp_path / "gomod"))  # the shared Go caches keep no fake modules
    monkeypatch.setenv("LIQO_STACK_CACHE", str(tmp_path / "cache"))
    pins = tmp_path / "toolchain.toml"
    pins.write_text(FAKE_PINS)
    return pins


def build_output(build: ModuleType, *args: str) -> tuple[int, str]:
    out = io.StringIO()
    code = build.main([*args], out=out)
    return code, out.getvalue()


needs_go = pytest.mark.skipif(shutil.which("go") is None, reason="go is not on PATH")


@needs_go
def test_progress_says_n_of_m_and_a_failure_names_its_log(build: ModuleType, fake_toolchain: Path) -> None:
    code, out = build_output(build, "--pins", str(fake_toolchain), "--progress-interval", "0.05")
    cache = fake_toolchain.parent / "cache"
    assert code == 1, out
    assert "toolchain: building 2 of 2 pinned tools (hello, broken)" in out
    assert f"[1/2] hello v1.0.0: downloading modules (full log: {cache}/tools/hello-v1.0.0/build.log)" in out
    assert "[1/2] hello: compiling hello, hey (one go build, " in out
    assert re.search(
        r"^\[1/2\] hello: done: downloads \d+s, compile \d+s using [\d.]+ of \d+ cores; "
        r"hello, hey; \d+ packages compiled",
        out,
        re.MULTILINE,
    ), out
    assert re.search(r"^\[\d/2\] \w+: still (downloading|compiling)", out, re.MULTILINE), out  # the heartbeat
    # the failure: what go said, and where the whole log is
    log = cache / "tools" / "broken-v2.0.1" / "build.log"
    assert "[2/2] broken: FAILED after" in out and "undefined: undefinedCall" in out
    assert f"[2/2] broken: full log: {log}" in out
    assert f"toolchain: FAILED: broken (full log: {log})" in out
    assert "undefined: undefinedCall" in log.read_text() and "$ go build -v" in log.read_text()
    assert re.search(r"^toolchain: 1 of 2 built in \d+s \(downloads \+ compile: hello \d+s \+ \d+s\)$", out, re.M), out
    assert "\r" not in out  # plain lines: CI has no terminal
    # what built is linked and stamped: one go build made both binaries, renamed as pinned
    hey = subprocess.run([str(cache / "bin" / "hey")], capture_output=True, text=True, check=True)
    assert hey.stdout == "hello v1.0.0\n"
    assert (cache / "bin" / "hello").exists()
    assert not (cache / "tools" / "broken-v2.0.1" / "stamp").exists()

    code, out = build_output(build, "--pins", str(fake_toolchain), "broken")
    assert code == 1 and "toolchain: building 1 of 1 pinned tools (broken)" in out and "[1/1] broken" in out
    code, out = build_output(build, "--pins", str(fake_toolchain), "hello")
    assert code == 0 and out.strip() == str(cache / "bin")  # warm: nothing to build


@needs_go
def test_optional_pins_wait_to_be_asked_and_a_command_of_ours_is_rebuilt_when_edited(
    build: ModuleType, fake_toolchain: Path, tmp_path: Path
) -> None:
    ours = tmp_path / "ours"
    ours.mkdir()
    (ours / "main.go").write_text(HELLO.replace('"hello"', '"ours"'))
    fake_toolchain.write_text(
        FAKE_PINS.split("[broken]")[0]
        + f"""
[ours]
module = "example.com/hello"
version = "v1.0.0"
main = "{ours}"
packages = ["."]
binary_names = {{ "." = "ours" }}
ldflags = ["-X main.version=mine"]
optional = true
"""
    )
    cache = fake_toolchain.parent / "cache"
    code, out = build_output(build, "--pins", str(fake_toolchain))
    assert code == 0 and "building 1 of 1 pinned tools (hello)" in out, out  # the optional one waits
    assert not (cache / "bin" / "ours").exists()

    code, out = build_output(build, "--pins", str(fake_toolchain), "--with-optional")
    assert code == 0 and "building 1 of 2 pinned tools (ours)" in out, out
    ran = subprocess.run([str(cache / "bin" / "ours")], capture_output=True, text=True, check=True)
    assert ran.stdout == "ours mine\n"
    code, out = build_output(build, "--pins", str(fake_toolchain), "--with-optional")
    assert code == 0 and "building" not in out  # warm

    (ours / "main.go").write_text(HELLO.replace('"hello"', '"edited"'))
    code, out = build_output(build, "--pins", str(fake_toolchain), "--with-optional")
    assert code == 0 and "building 1 of 2 pinned tools (ours)" in out, out
    ran = subprocess.run([str(cache / "bin" / "ours")], capture_output=True, text=True, check=True)
    assert ran.stdout == "edited mine\n"


@needs_go
def test_a_single_package_with_a_major_version_suffix_gets_its_pinned_name(
    build: ModuleType, fake_toolchain: Path
) -> None:
    fixed = FAKE_PINS.replace("[broken]", "[broken-old]").replace("example.com/broken/v2", "example.com/fixed/v3")
    fake_toolchain.write_text(fixed.replace('version = "v2.0.1"', 'version = "v3.0.0"'))
    publish(fake_toolchain.parent / "proxy", "example.com/fixed/v3", "v3.0.0", {"main.go": HELLO})
    code, out = build_output(build, "--pins", str(fake_toolchain), "broken-old")
    assert code == 0, out
    assert (fake_toolchain.parent / "cache" / "bin" / "broken").exists()  # not `v3`, not `fixed`


def test_still_line_names_the_binaries_counts_and_time(build: ModuleType) -> None:
    pins = build.load_pins()
    step = build.ToolBuild("kubernetes", pins["kubernetes"], pins, 1, 5)
    step.started = step.phase_started = 100.0
    step.phase = "downloading"
    assert not step.on_download("go: finding module for package x")
    assert step.on_download("go: downloading k8s.io/api v0.36.3")
    assert step.status(112.0) == "[1/5] kubernetes: still downloading (1 modules so far, last k8s.io/api v0.36.3) 12s"
    step.phase = "compiling"
    step.phase_started = 110.0
    step.packages = {"fmt", "k8s.io/apiserver/pkg/server", "k8s.io/kubernetes/cmd/kube-scheduler"}
    assert step.on_compile("k8s.io/apiserver/pkg/server")
    assert not step.on_compile("# k8s.io/apiserver/pkg/server")  # a diagnostic, kept for the failure message
    assert step.status(230.0) == (
        "[1/5] kubernetes: still compiling kube-apiserver, kube-controller-manager, kube-scheduler, kubectl "
        "(1/3 packages compiled, last k8s.io/apiserver/pkg/server) 2m00s"
    )
    assert step.on_compile("k8s.io/kubernetes/cmd/kube-scheduler")
    assert "(2/3 packages compiled, linking kube-scheduler) 2m00s" in step.status(230.0)


def test_go_names_a_major_version_binary_after_the_element_before(build: ModuleType) -> None:
    assert build.go_default_name("go.etcd.io/etcd/server/v3") == "server"
    assert build.go_default_name("sigs.k8s.io/kwok/cmd/kwokctl") == "kwokctl"
    assert build.elapsed(130.7) == "2m10s" and build.elapsed(9) == "9s"


def test_compilers_collect_garbage_less_often_only_with_memory_to_spare(
    build: ModuleType, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("GOGC", raising=False)
    monkeypatch.setattr(build, "memory_available", lambda: 20 << 30)
    assert build.go_env()["GOGC"] == "400"
    monkeypatch.setattr(build, "memory_available", lambda: 4 << 30)
    assert "GOGC" not in build.go_env()
    monkeypatch.setenv("GOGC", "150")  # the user's choice wins
    monkeypatch.setattr(build, "memory_available", lambda: 20 << 30)
    assert build.go_env()["GOGC"] == "150"


def test_a_pinned_replace_version_wins_over_the_required_one(build: ModuleType) -> None:
    gomod = {
        "Require": [{"Path": "github.com/pulumi/pulumi-kubernetes/sdk/v4", "Version": "v4.24.0"}],
        "Replace": [{"Old": {"Path": "github.com/pulumi/pulumi-kubernetes/sdk/v4"}, "New": {"Path": "../sdk"}}],
    }
    pin = {"module": "m", "replace_versions": {"github.com/pulumi/pulumi-kubernetes/sdk/v4": "v4.25.0"}}
    assert build.restated_replaces(gomod, pin) == [
        "github.com/pulumi/pulumi-kubernetes/sdk/v4 => github.com/pulumi/pulumi-kubernetes/sdk/v4 v4.25.0"
    ]


def test_json_is_written_as_go_marshals_it(build: ModuleType) -> None:
    value = {"b": "<a href='x'>&</a>", "a": [1, 2.5, True, None], "u": "é\u2028\n\t\x01"}
    assert build.go_json(value) == (
        '{"b":"\\u003ca href=\'x\'\\u003e\\u0026\\u003c/a\\u003e","a":[1,2.5,true,null],"u":"é\\u2028\\n\\t\\u0001"}'
    )
    assert build.sort_keys({"z": {"y": 1, "x": 2}, "a": [{"d": 1, "c": 2}]}) == {
        "a": [{"c": 2, "d": 1}],
        "z": {"x": 2, "y": 1},
    }


PLUGIN_MAIN = """package main

import (
	_ "embed"
	"fmt"
)

//go:embed schema-embed.json
var schema []byte

//go:embed terraform-mapping-embed.json
var mapping []byte

func main() { fmt.Printf("%s\\n%s\\n", schema, mapping) }
"""

PLUGIN_PINS = """
[pulumi-kubernetes]
module = "example.com/provider"
version = "v1.0.0"
release = "4.25.0"
packages = ["cmd/pulumi-resource-kubernetes"]
embeds = "pulumi-kubernetes"
plugin = { kind = "resource", name = "kubernetes" }
"""


@needs_go
def test_a_plugin_is_built_with_its_generated_embeds_and_kept_out_of_bin(
    build: ModuleType, fake_toolchain: Path
) -> None:
    """The module cache is read-only: the embedded files are generated into a copy of the module."""
    schema = {"name": "kubernetes", "displayName": "Kubernetes", "description": "<k8s>", "types": {}}
    publish(
        fake_toolchain.parent / "proxy",
        "example.com/provider",
        "v1.0.0",
        {
            "cmd/pulumi-resource-kubernetes/main.go": PLUGIN_MAIN,
            "cmd/pulumi-resource-kubernetes/schema.json": json.dumps(schema, indent=4),
            "cmd/pulumi-resource-kubernetes/terraform-mapping.json": '{"b": 1, "a": {"d": 2, "c": 3}}',
        },
    )
    fake_toolchain.write_text(PLUGIN_PINS)
    code, out = build_output(build, "--pins", str(fake_toolchain))
    assert code == 0, out
    cache = fake_toolchain.parent / "cache"
    plugin = cache / "plugins" / "resource-kubernetes-v4.25.0" / "pulumi-resource-kubernetes"
    assert not (cache / "bin" / "pulumi-resource-kubernetes").exists()  # on PATH, Pulumi would warn
    embedded = subprocess.run([str(plugin)], capture_output=True, text=True, check=True).stdout.splitlines()
    assert embedded == [
        '{"name":"kubernetes","displayName":"Kubernetes","version":"4.25.0","description":"\\u003ck8s\\u003e",'
        '"types":{}}',
        '{"a":{"c":3,"d":2},"b":1}',
    ]


def test_the_plugin_the_sdk_asks_for_is_the_one_built(build: ModuleType) -> None:
    """pulumi-kubernetes' Python SDK asks the engine for the plugin of its own version, and nothing is
    downloaded: the pin, the SDK it builds with and the Python package must name one release."""
    import tomllib

    pin = build.load_pins()["pulumi-kubernetes"]
    dependencies = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["dependencies"]
    assert f"pulumi-kubernetes=={pin['release']}" in dependencies
    assert pin["replace_versions"]["github.com/pulumi/pulumi-kubernetes/sdk/v4"] == f"v{pin['release']}"
