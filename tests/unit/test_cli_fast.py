"""cli_fast.py: ``pysandbox run -- CMD ...`` read without argparse gives argparse's own
namespace for the same argv (every option's default, the command with its ``--``), and
every other command line goes to the parser. The import side (argparse stays out of such a
launch) is tests/unit/test_startup_imports.py's."""

from __future__ import annotations

import pytest

from pysandbox import cli, cli_fast

FAST = [
    ["run", "--", "true"],
    ["run", "--", "sh", "-c", "echo --verbose"],
    ["run", "--", "--help"],                 # after --, a command's own argument
    ["run", "--", "run", "--", "x"],
]
PARSED = [
    ["run", "--"],                           # no command: the parser's path reports it
    ["run", "true"],
    ["run", "--verbose", "--", "true"],
    ["--verbose", "run", "--", "true"],
    ["run", "--network", "allow", "--", "true"],
    ["status"],
    ["--help"],
    [],
]


@pytest.mark.parametrize("argv", FAST, ids=" ".join)
def test_the_fast_namespace_is_argparses(argv):
    fast = cli_fast.run_args(argv)
    assert fast is not None
    assert vars(fast) == vars(cli.build_parser().parse_args(argv))


@pytest.mark.parametrize("argv", PARSED, ids=lambda a: " ".join(a) or "(none)")
def test_every_other_command_line_goes_to_the_parser(argv):
    assert cli_fast.run_args(argv) is None


def test_control_an_option_changes_argparses_namespace():
    """The comparison above can fail: an option given makes argparse's namespace differ."""
    fast = vars(cli_fast.run_args(["run", "--", "true"]))
    parsed = vars(cli.build_parser().parse_args(["run", "--network", "allow", "--", "true"]))
    assert fast != parsed and {k for k in fast if fast[k] != parsed[k]} == {"network"}


def test_fast_namespaces_share_no_list():
    one, two = cli_fast.run_args(["run", "--", "a"]), cli_fast.run_args(["run", "--", "b"])
    one.ro.append("/x")
    assert two.ro == [] and one.command == ["--", "a"]


def test_a_usage_error_on_the_fast_path_goes_through_the_parser(capsys):
    with pytest.raises(SystemExit) as exc:
        cli_fast.Deferred(cli.build_parser).error("run needs a command after --")
    assert exc.value.code == 2
    assert "usage: pysandbox" in capsys.readouterr().err
