"""Each side declares its own half (docs/security.md): a foreign cluster's own stack (liqo:foreignSide)
issues identities; a home stack peers through one and declares nothing in that cluster. Pulumi's mocks
record which objects go to which cluster; tests/e2e/test_two_homes.py runs both for real."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pulumi
import pytest

from liqo_stack.declaring.config import ConfigError, parse, parse_any
from runtime.api import names
from tests.unit.test_components import RecordingMocks

KUBECONFIG = (
    "apiVersion: v1\nkind: Config\ncurrent-context: c\n"
    "clusters: [{name: c, cluster: {server: 'https://127.0.0.1:6443', certificate-authority-data: QURNSU4=}}]\n"
    "contexts: [{name: c, context: {cluster: c, user: u}}]\nusers: [{name: u, user: {token: %s}}]\n"
)


@pytest.fixture
def files(tmp_path: Path) -> dict[str, Path]:
    admin, issued = tmp_path / "admin.yaml", tmp_path / "issued.yaml"
    admin.write_text(KUBECONFIG % "admin")
    issued.write_text(KUBECONFIG % "issued-to-home")
    return {"admin": admin, "issued": issued}


def run_with(config: dict[str, Any]) -> RecordingMocks:
    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    recorder = RecordingMocks()
    pulumi.runtime.set_mocks(recorder, project="liqo-stack", stack="unit", preview=False)
    pulumi.runtime.set_all_config({f"liqo:{k}": json.dumps(v) for k, v in config.items()})

    @pulumi.runtime.test  # type: ignore[untyped-decorator]
    def program() -> None:
        from liqo_stack.declaring.program import main

        main()

    try:
        program()
    finally:
        pulumi.runtime.set_all_config({})
        asyncio.set_event_loop(None)
        loop.close()
    return recorder


def test_a_home_stack_peered_through_an_issued_identity_declares_nothing_in_that_cluster(
    files: dict[str, Path],
) -> None:
    mocks = run_with(
        {
            "home": {"clusterId": "home", "kubeconfigPath": str(files["admin"])},
            "foreignClusters": [{"clusterId": "foreign-1", "identityKubeconfigPath": str(files["issued"])}],
        }
    )
    assert mocks.in_cluster("foreign-1") == [], "no object, no provider: no admin credentials of foreign-1"
    assert not [r for r in mocks.resources if r.typ == "pulumi:providers:kubernetes" and "foreign-1" in r.name]
    home = {(m["kind"], m["metadata"]["name"]): m for m in mocks.in_cluster("home")}
    secret = mocks.by_name("home:credentials-foreign-1")
    assert "issued-to-home" in json.dumps(secret.inputs), "the credentials Secret holds the issued kubeconfig"
    assert ("VirtualNode", names.virtual_node_name("foreign-1")) in home


def test_a_foreign_sides_stack_serves_each_home_with_its_own_tenant_identity_floor_and_grant(
    files: dict[str, Path],
) -> None:
    mocks = run_with(
        {
            "foreignSide": {
                "clusterId": "foreign-1",
                "kubeconfigPath": str(files["admin"]),
                "homes": [
                    {"clusterId": "home", "podSecurity": "restricted", "grant": {"resources": {"cpu": "4"}}},
                    {"clusterId": "home-2"},
                ],
            }
        }
    )
    objects = mocks.in_cluster("foreign-1")
    kinds = {(m["kind"], m["metadata"]["name"]) for m in objects}
    assert ("ValidatingAdmissionPolicy", names.SHADOWPOD_POLICY) in kinds
    assert ("Deployment", names.FOREIGN_AGENT) in kinds
    for home, level in (("home", "restricted"), ("home-2", "baseline")):
        tenant = next(m for m in objects if m["kind"] == "Namespace" and m["metadata"]["name"] == f"liqo-tenant-{home}")
        assert tenant["metadata"]["labels"][names.POD_SECURITY_ENFORCE_LABEL] == level
        assert ("ServiceAccount", names.home_identity_name(home)) in kinds
        assert ("Quota", home) in kinds
    quota = next(m for m in objects if m["kind"] == "Quota" and m["metadata"]["name"] == "home")
    assert quota["spec"]["resources"] == {"cpu": "4"} and quota["spec"]["user"] == names.home_identity_username("home")
    assert not mocks.in_cluster("home"), "nothing at any home"


def test_each_half_refuses_settings_of_the_other() -> None:
    identity = {"clusterId": "foreign-1", "identityKubeconfig": "x"}
    home = {"clusterId": "home", "kubeconfig": "x"}
    with pytest.raises(ConfigError, match=r"liqo:foreignClusters\[0\]: .*leave kubeconfig and kubeconfigPath out"):
        parse({"home": home, "foreignClusters": [{**identity, "kubeconfig": "admin"}]})
    with pytest.raises(ConfigError, match=r"podSecurity: declared by the foreign cluster's own stack"):
        parse({"home": home, "foreignClusters": [{**identity, "podSecurity": "restricted"}]})
    with pytest.raises(ConfigError, match=r"liqo:foreignSide: a stack declares one foreign cluster's side or a home"):
        parse_any({"home": home, "foreignSide": {"clusterId": "f", "kubeconfig": "x", "homes": [{"clusterId": "h"}]}})
    with pytest.raises(ConfigError, match=r"liqo:foreignSide.homes: .*repeated: \['h'\]"):
        parse_any({"foreignSide": {"clusterId": "f", "kubeconfig": "x", "homes": [{"clusterId": "h"}] * 2}})
