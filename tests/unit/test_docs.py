"""The docs cannot drift from the program: the configuration reference is the models' own, every
`liqo-stack` command shown parses against the real command line, and every shell block is run by a
test that exists (tests/support/docs.py says how a block names it)."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from liqo_stack.declaring import config, manifests
from liqo_stack.declaring import docs as generated
from tests.support import docs
from tests.support.docs import REPO


def test_the_configuration_reference_is_generated_from_the_config_models() -> None:
    committed = (REPO / "docs" / "configuration.md").read_text()
    assert committed == generated.config_reference(), (
        f"docs/configuration.md is stale: the config models changed. Regenerate it with `{generated.REGENERATE}`"
    )


def test_the_identities_page_is_generated_from_the_rbac_rules_the_stack_declares() -> None:
    committed = (REPO / "docs" / "identities.md").read_text()
    assert committed == generated.identities_reference(), (
        f"docs/identities.md is stale: the RBAC rules changed. Regenerate it with `{generated.REGENERATE_IDENTITIES}`"
    )


def test_the_tables_of_the_security_page_are_generated_from_what_the_stack_declares() -> None:
    committed = generated.SECURITY_PAGE.read_text()
    assert committed == generated.with_generated_tables(committed), (
        "docs/security.md's tables are stale: the stack's RBAC rules, admission policy, names or grant "
        f"checks changed. Regenerate them with `{generated.REGENERATE_SECURITY}`"
    )
    assert sorted(generated.generated_sections(committed)) == sorted(generated.SECURITY_TABLES), (
        "each generated table is in the page, once"
    )


def test_a_new_right_of_the_home_identity_shows_in_the_security_page_or_fails_a_claim_it_contradicts(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    page = generated.SECURITY_PAGE.read_text()
    read_crds = {"apiGroups": ["apiextensions.k8s.io"], "resources": ["customresourcedefinitions"], "verbs": ["get"]}
    monkeypatch.setattr(manifests, "HOME_IDENTITY_TENANT_RULES", [*manifests.HOME_IDENTITY_TENANT_RULES, read_crds])
    assert "get `customresourcedefinitions.apiextensions.k8s.io`" in generated.with_generated_tables(page)
    # the page says it may not read the Secrets of its tenant namespace: a rule that lets it fails the generation
    read_secrets = {"apiGroups": [""], "resources": ["secrets"], "verbs": ["get"]}
    monkeypatch.setattr(manifests, "HOME_IDENTITY_TENANT_RULES", [*manifests.HOME_IDENTITY_TENANT_RULES, read_secrets])
    with pytest.raises(ValueError, match="may not read the Secrets of its tenant namespace"):
        generated.with_generated_tables(page)


def test_a_new_validation_of_the_admission_policy_shows_in_the_security_page(monkeypatch: pytest.MonkeyPatch) -> None:
    page = generated.SECURITY_PAGE.read_text()
    policy = manifests.shadowpod_policy()
    policy["spec"]["validations"].append(
        {"expression": "true", "messageExpression": "'too many pods in ' + namespaceObject.metadata.name"}
    )
    monkeypatch.setattr(manifests, "shadowpod_policy", lambda: policy)
    assert "| 7 | too many pods in `<name>` | Invalid |" in generated.with_generated_tables(page)


def test_a_marker_naming_no_table_is_an_error() -> None:
    page = "# x\n\n<!-- GENERATED no-such-table -->\n<!-- END GENERATED -->\n"
    with pytest.raises(ValueError, match="no-such-table: no such generated table"):
        generated.with_generated_tables(page)


def test_every_setting_of_the_config_models_is_in_the_reference() -> None:
    reference = generated.config_reference()
    for path, model in generated._models():
        if model is config.ForeignSideStackConfig:
            continue  # the marker where a foreign side's settings start: its own are the sections after it
        for key, info in generated._fields(model):
            assert info.description, f"liqo:{path}.{key} has no description"
            assert f"| `{key}` |" in reference


def test_every_shell_block_of_the_docs_parses_and_is_run_by_a_test() -> None:
    problems = [p for path in docs.documents() for b in docs.blocks(path) for p in docs.block_problems(b)]
    assert not problems, "\n".join(problems)


def test_the_readme_has_a_runnable_tour_without_sleeps() -> None:
    tour = docs.runnable_blocks()
    assert len(tour) >= 3
    text = "\n".join(b.text for b in tour)
    for step in (
        "liqo-stack offload namespace",
        "kubectl -n tour logs",
        "kubectl -n tour exec",
        "liqo-stack unoffload",
    ):
        assert step in text
    assert not re.search(r"\bsleep\s+\d", text), "the tour waits on conditions (kubectl wait, rollout status)"


def test_the_readme_is_a_guide_with_one_diagram() -> None:
    readme = (REPO / "README.md").read_text()
    assert len(readme.splitlines()) < 200
    assert readme.count("```mermaid") == 1
    for command in ("bash scripts/demo.sh", "bash scripts/test.sh"):
        assert f"```sh\n   {command}\n   ```" in readme


def test_the_set_up_scripts_run_what_the_docs_say() -> None:
    """`bash scripts/demo.sh` bootstraps then runs `liqo-stack demo` (its options pass through), and
    `bash scripts/test.sh` runs ruff, mypy and pytest; CI (`.ci/run`) runs the latter."""
    demo, test = (REPO / "scripts" / "demo.sh").read_text(), (REPO / "scripts" / "test.sh").read_text()
    for script in ("scripts/demo.sh", "scripts/test.sh", "scripts/bootstrap.sh", ".ci/run"):
        subprocess.run(["bash", "-n", str(REPO / script)], check=True)
    assert "bash scripts/bootstrap.sh" in demo and "bash scripts/bootstrap.sh" in test
    assert 'exec .venv/bin/liqo-stack demo "$@"' in demo
    assert docs.cli_error(["demo", "--replicas", "6"]) is None
    for step in (".venv/bin/ruff check .", ".venv/bin/ruff format --check .", ".venv/bin/mypy", ".venv/bin/pytest"):
        assert step in test
    assert "scripts/test.sh" in (REPO / ".ci" / "run").read_text()


def test_the_benches_named_in_the_docs_exist() -> None:
    text = (REPO / "docs" / "performance.md").read_text()
    modules = re.findall(r"python -m (tests\.bench\.\w+)", text)
    files = re.findall(r"python (tests/bench/\w+\.py)", text)
    assert modules and files
    for name in [m.replace(".", "/") + ".py" for m in modules] + files:
        source = (REPO / name).read_text()
        assert '__name__ == "__main__"' in source, f"{name} is not runnable"


def github_anchors(markdown: str) -> set[str]:
    """The anchors GitHub gives a page's headings: lower case, punctuation dropped, spaces as dashes."""
    headings = re.findall(r"^#+ (.+)$", re.sub(r"```.*?```", "", markdown, flags=re.S), flags=re.M)
    return {re.sub(r"[^\w\- ]", "", h.strip().lower()).replace(" ", "-") for h in headings}


def test_relative_links_of_the_docs_point_at_files_and_headings() -> None:
    broken = []
    for path in docs.documents():
        for target, anchor in re.findall(r"\]\(([^)#\s]*)(?:#([^)\s]*))?\)", path.read_text()):
            if "://" in target:
                continue
            linked = (path.parent / target) if target else path
            if not linked.exists():
                broken.append(f"{path.relative_to(REPO)}: {target}")
            elif anchor and linked.suffix == ".md" and anchor not in github_anchors(linked.read_text()):
                broken.append(f"{path.relative_to(REPO)}: {target}#{anchor}")
    assert not broken, broken


# -- the checks fail when the docs and the program part ---------------------------------------------
SYNTHETIC = """# page

<!-- tested by: tests/unit/test_docs.py::test_the_set_up_scripts_run_what_the_docs_say -->
```sh
liqo-stack offload namespace shop --pod-offloading-strategy Remote
```
"""


def problems_of(tmp_path: Path, markdown: str, name: str = "page.md") -> list[str]:
    page = tmp_path / name
    page.write_text(markdown)
    return [p for b in docs.blocks(page) for p in docs.block_problems(b, runnable_in=tmp_path / "README.md")]


def test_a_synthetic_page_that_is_right_passes(tmp_path: Path) -> None:
    assert problems_of(tmp_path, SYNTHETIC) == []


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        pytest.param(
            ("--pod-offloading-strategy", "--pod-offload-strategy"),
            "No such option '--pod-offload-strategy'",
            id="a-renamed-flag",
        ),
        pytest.param(("offload namespace", "offload ns"), "No such command 'ns'", id="a-renamed-subcommand"),
        pytest.param(("Remote", "Elsewhere"), "'Elsewhere' is not one of", id="a-value-the-cli-refuses"),
        pytest.param(
            ("test_the_set_up_scripts_run_what_the_docs_say", "test_that_was_removed"),
            "defines no test_that_was_removed",
            id="a-test-that-disappeared",
        ),
        pytest.param(
            ("tests/unit/test_docs.py", "tests/unit/test_gone.py"), "no file tests/unit/test_gone.py", id="a-file-gone"
        ),
        pytest.param(
            ("<!-- tested by: tests/unit/test_docs.py::test_the_set_up_scripts_run_what_the_docs_say -->\n", ""),
            "a shell block must be fenced ```sh runnable",
            id="no-runner",
        ),
        pytest.param(
            ("```sh\n", "```sh runnable\n"), "only README.md's runnable blocks are run", id="runnable-elsewhere"
        ),
    ],
)
def test_the_check_fails_when_the_docs_and_the_program_part(
    tmp_path: Path, change: tuple[str, str], expected: str
) -> None:
    problems = problems_of(tmp_path, SYNTHETIC.replace(*change))
    assert any(expected in p for p in problems), problems


def test_the_check_reads_commands_inside_substitutions_continuations_and_chains(tmp_path: Path) -> None:
    markdown = """<!-- tested by: tests/unit/test_docs.py::test_the_set_up_scripts_run_what_the_docs_say -->
```sh
eval "$(.venv/bin/liqo-stack dev envv)"
kubectl get ns && LIQO=1 liqo-stack info --output xml
.venv/bin/liqo-stack offload namespace shop \\
    --selektor 'topology.liqo.io/region in (europe,us-west)'   # a comment
```
"""
    problems = "\n".join(problems_of(tmp_path, markdown))
    assert "No such command 'envv'" in problems
    assert "'xml' is not one of" in problems
    assert "No such option '--selektor'" in problems


def test_a_script_named_as_the_runner_must_contain_the_command(tmp_path: Path) -> None:
    right = "<!-- tested by: .ci/run -->\n```sh\nbash scripts/test.sh\n```\n"
    assert problems_of(tmp_path, right) == []
    wrong = right.replace("scripts/test.sh", "scripts/other.sh")
    assert any(".ci/run does not run 'bash scripts/other.sh'" in p for p in problems_of(tmp_path, wrong))


def test_a_stale_configuration_reference_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    """What the staleness test compares changes with a description in the models."""
    before = generated.config_reference()
    info = config.NetworkConfig.model_fields["remapping_pool"]
    monkeypatch.setattr(info, "description", "a description changed in the model")
    assert generated.config_reference() != before
    assert "a description changed in the model" in generated.config_reference()
