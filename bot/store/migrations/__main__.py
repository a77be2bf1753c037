"""`python -m bot.store.migrations <alembic command>`: Alembic's commands, no alembic.ini.

They connect to DATABASE_URL (default sqlite:///baton.db). A new revision after a
model change: `DATABASE_URL=sqlite:////tmp/m.db python -m bot.store.migrations
upgrade head`, then the same with `revision --autogenerate -m "what changed"`.
"""

from __future__ import annotations

import logging
import sys

from alembic.config import CommandLine

from bot.store.migrations import alembic_config


def main(argv: list[str] | None = None) -> None:
    cli = CommandLine(prog="python -m bot.store.migrations")
    options = cli.parser.parse_args(argv)
    if not hasattr(options, "cmd"):
        cli.parser.error("too few arguments")
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    logging.getLogger("alembic").setLevel(logging.INFO)
    config = alembic_config()
    config.cmd_opts = options
    cli.run_cmd(config, options)


if __name__ == "__main__":
    main(sys.argv[1:])
