"""Every option of every ``strata`` command says what it does (issue 26): the test walks the
whole click tree, so an option added without help text fails here."""

from __future__ import annotations

import click

from strata.cli.main import cli


def walk(cmd: click.Command, path: tuple[str, ...] = ("strata",)):
    yield path, cmd
    if isinstance(cmd, click.Group):
        for name, sub in cmd.commands.items():
            yield from walk(sub, (*path, name))


def test_every_command_and_option_has_help():
    missing = []
    commands = list(walk(cli))
    assert len(commands) > 20          # the walk reached the subcommands
    for path, cmd in commands:
        if not (cmd.help or cmd.short_help):
            missing.append(f"{' '.join(path)}: no docstring")
        for p in cmd.params:
            if isinstance(p, click.Option) and not (p.help or "").strip():
                missing.append(f"{' '.join(path)} {'/'.join(p.opts)}: no help text")
    assert not missing, "\n".join(missing)


def test_the_walk_finds_an_option_without_help():
    @click.command()
    @click.option("--bare")
    def bare(bare: str) -> None:
        """A command."""

    (path, cmd), = walk(bare, ("x",))
    assert [p for p in cmd.params if isinstance(p, click.Option) and not p.help]


def test_every_argument_but_the_store_directory_is_named_in_its_command_help():
    """``strata get --help`` said "from OFFSET" but not what TOPIC and QUEUE are (docs/guide.md,
    the second hour): each positional argument is named in its command's help. DIR (the store
    directory) is explained once, by ``strata --help``."""
    unnamed = []
    for path, cmd in walk(cli):
        for p in cmd.params:
            name = p.human_readable_name
            if isinstance(p, click.Argument) and name not in ("DIR", "DIRECTORY") \
                    and name not in (cmd.help or ""):
                unnamed.append(f"{' '.join(path)}: {name}")
    assert not unnamed, "\n".join(unnamed)
