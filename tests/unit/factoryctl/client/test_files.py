"""``factoryctl validate --server``: :func:`collect_files` sends what the loader reads, notifications too."""

from __future__ import annotations

from pathlib import Path

from factoryctl.client.files import collect_files


def test_every_definition_folder_is_collected(tmp_path: Path) -> None:
    files = {
        "factory.yaml": "name: acme\n",
        "webhooks/a.yaml": "secretName: s\n",
        "environments/e.yaml": "setup: [make]\n",
        "schedules/s.yaml": 'cron: "0 2 * * *"\nprompt: x\n',
        "notifications/ops.yaml": "url: https://hooks.example.com/\nsecretName: s\nevents: [FAILED]\n",
        "notifications/.ops.yaml.swp": "editor state",
        "automations/triage/automation.md": "---\n---\nTriage.\n",
        "README.md": "not a definition",
    }
    for rel, text in files.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(text)
    collected = collect_files(tmp_path)
    assert sorted(collected) == [
        "automations/triage/automation.md",
        "environments/e.yaml",
        "factory.yaml",
        "notifications/ops.yaml",
        "schedules/s.yaml",
        "webhooks/a.yaml",
    ]
    assert collected["notifications/ops.yaml"] == files["notifications/ops.yaml"].encode()
