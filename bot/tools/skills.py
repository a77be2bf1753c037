"""Skills: folders holding a `SKILL.md`, offered by name and loaded on demand by `skill`.

A skill is the open Agent Skills format: `<name>/SKILL.md` starts with YAML frontmatter
giving its `name` and `description`, then the instructions; other files of the folder
(references, scripts) are read when the instructions call for them. Skills are found
in `<workspace>/.baton/skills/` and then `<workspace>/.claude/skills/`; the first of a
name wins.

Every file is opened through the workspace jail (`Workspace.open_file`) and must really
lie in its skill's folder, itself really in one of those two directories: no symlink
leads a skill elsewhere, even inside the workspace. Secret-looking files and the files
a deny rule hides are refused, since this tool never asks a person.
"""

from __future__ import annotations

import asyncio
import codecs
import contextlib
import logging
import os
import re
import stat
import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from pydantic import Field

from bot.errors import ToolError
from bot.frontmatter import YAML_FAILURES, read_leniently, split_frontmatter, yaml_problem
from bot.permissions.rule_globs import glob_to_regex
from bot.permissions.secret_paths import find_path_danger
from bot.tools.base import Tool, ToolArguments, person_approved
from bot.tools.safe_open import check_path_text, identity
from bot.tools.workspace import Opened, Workspace

logger = logging.getLogger(__name__)

SKILL_TOOL_NAME = "skill"
SKILL_FILE = "SKILL.md"
# Where skills are found, in order: the first skill of a name wins.
SKILL_ROOTS: tuple[tuple[str, ...], ...] = ((".baton", "skills"), (".claude", "skills"))
NAME_PATTERN = re.compile(r"^[a-z0-9][a-z0-9._-]*$")
MAX_NAME_CHARS = 64
MAX_DESCRIPTION_CHARS = 1_024
# What the tool description shows of each skill, and of all of them.
SHOWN_DESCRIPTION_CHARS = 300
MAX_LISTED_SKILLS = 50
MAX_LISTING_CHARS = 8_000
# Folders looked at in one skills directory; more are reported, not read.
MAX_SKILL_FOLDERS = 500
# Bytes read of a SKILL.md or another file, and characters shown of it (under the
# engine's cap on a tool result, with room for the header and the file list).
MAX_READ_BYTES = 256 * 1024
# What a scan reads of each SKILL.md: its frontmatter must end within it.
MAX_FRONTMATTER_BYTES = 64 * 1024
MAX_SHOWN_CHARS = 25_000
MAX_LISTED_FILES = 100
MAX_SCANNED_ENTRIES = 5_000

TOOL_DESCRIPTION = """\
Load a skill: instructions (and files) written for one kind of task. When a task \
matches a skill below, call this with its name first and follow what it says. Pass \
`file` (a path inside the skill's folder, as the instructions name it) to read one of \
its other files. It only reads.

Available skills:
{skills}"""
NO_SKILLS = (
    "(none: a skill is a folder <name>/ holding a SKILL.md, in .baton/skills/ or .claude/skills/)"
)


@dataclass(frozen=True, slots=True, kw_only=True)
class Skill:
    """A valid skill: its name, its description on one line, and its folder.

    `folder` is workspace-relative as found (`.claude/skills/pdf`); `real_folder` is
    where it really lies (the same unless the folder is a link to another skill folder).
    """

    name: str
    description: str
    folder: str
    real_folder: tuple[str, ...]

    @property
    def source(self) -> str:
        return f"{self.folder}/{SKILL_FILE}"


@dataclass(frozen=True, slots=True, kw_only=True)
class InvalidSkill:
    """A skill folder that was skipped, and why."""

    path: str
    reason: str


@dataclass(frozen=True, slots=True, kw_only=True)
class ShadowedSkill:
    """A valid skill that lost to an earlier one of the same name."""

    name: str
    source: str
    shadowed_by: str


@dataclass(frozen=True, slots=True, kw_only=True)
class FoundSkills:
    """What a scan of the skill directories found."""

    skills: tuple[Skill, ...] = ()
    invalid: tuple[InvalidSkill, ...] = ()
    shadowed: tuple[ShadowedSkill, ...] = ()

    def get(self, name: str) -> Skill | None:
        return next((s for s in self.skills if s.name == name), None)


def one_line(text: str) -> str:
    """`text` as one line of plain text: control and format characters (newlines,
    bidi overrides, zero-width marks) become spaces, runs of spaces one."""
    cleaned = "".join(" " if unicodedata.category(ch).startswith("C") else ch for ch in text)
    return " ".join(cleaned.split())


def clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1].rstrip() + "…"


def find_skills(workspace: Workspace) -> FoundSkills:
    """Scan `.baton/skills/*/SKILL.md`, then `.claude/skills/*/SKILL.md`.

    The first skill of a name wins; a later one is reported as shadowed. A folder that
    cannot be a skill (no SKILL.md, no frontmatter, no name or description, a name
    that is not its folder's, a link out of the skill directories) is reported with
    the reason; nothing is raised. Plain files beside the folders (the older
    `<name>.md` skills agent files preload) are left alone.
    """
    chosen: dict[str, Skill] = {}
    invalid: list[InvalidSkill] = []
    shadowed: list[ShadowedSkill] = []
    for root in SKILL_ROOTS:
        shown_root = "/".join(root)
        try:
            names = _folder_names(workspace, root)
        except (ToolError, OSError) as exc:
            invalid.append(InvalidSkill(path=shown_root, reason=_reason(exc)))
            continue
        if len(names) > MAX_SKILL_FOLDERS:
            invalid.append(
                InvalidSkill(
                    path=shown_root,
                    reason=f"holds {len(names):,} entries; only the first "
                    f"{MAX_SKILL_FOLDERS:,} were looked at",
                )
            )
            names = names[:MAX_SKILL_FOLDERS]
        for name in names:
            folder = f"{shown_root}/{name}"
            try:
                skill = _load_skill(workspace, root, name)
            except (ToolError, OSError) as exc:
                invalid.append(InvalidSkill(path=folder, reason=_reason(exc)))
                continue
            if skill is None:
                continue
            winner = chosen.get(skill.name)
            if winner is None:
                chosen[skill.name] = skill
            else:
                shadowed.append(
                    ShadowedSkill(name=skill.name, source=skill.source, shadowed_by=winner.source)
                )
    return FoundSkills(
        skills=tuple(chosen.values()), invalid=tuple(invalid), shadowed=tuple(shadowed)
    )


def _reason(exc: BaseException) -> str:
    if isinstance(exc, OSError) and exc.strerror:
        return exc.strerror
    return str(exc)


def _folder_names(workspace: Workspace, root: tuple[str, ...]) -> list[str]:
    """The names in one skills directory that may be skill folders, sorted; none if it
    is missing. A link to a directory counts; plain files and dot-names do not."""
    with workspace.locate("/".join(root)) as found:
        if not found.exists:
            return []
        assert found.stat is not None
        if not stat.S_ISDIR(found.stat.st_mode):
            raise ToolError("is not a directory")
        if found.parts not in SKILL_ROOTS:
            raise ToolError(f"leads to {'/'.join(found.parts) or '.'}, not a skills directory")
    opened = workspace.open_dir("/".join(root))
    names = []
    try:
        with os.scandir(opened.fd) as entries:
            for entry in entries:
                if entry.name.startswith("."):
                    continue
                if entry.is_dir(follow_symlinks=False):
                    names.append(entry.name)
                elif entry.is_symlink() and not entry.name.endswith(".md"):
                    names.append(entry.name)
    finally:
        opened.close()
    return sorted(names)


def _load_skill(workspace: Workspace, root: tuple[str, ...], name: str) -> Skill | None:
    """The skill in `root/name`; None for a link to something that is not a directory.

    Raises:
        ToolError: It cannot be a skill; the message says why.
    """
    folder = "/".join((*root, name))
    real = _real_folder(workspace, folder, links_to_files_ok=True)
    if real is None:
        return None
    if not NAME_PATTERN.fullmatch(name) or len(name) > MAX_NAME_CHARS:
        raise ToolError(
            f"the folder name {name!r} is not a skill name (lowercase letters, digits, "
            f"'.', '_' and '-', starting with a letter or digit, at most {MAX_NAME_CHARS})"
        )
    if not os.path.lexists(workspace.root.joinpath(*real, SKILL_FILE)):
        raise ToolError(f"has no {SKILL_FILE}")
    opened = _open_in_skill(workspace, real, SKILL_FILE, hide=())
    try:
        text, more = _read_text(opened, binary_ok=False, limit=MAX_FRONTMATTER_BYTES)
    finally:
        opened.close()
    if more and split_frontmatter(text) is None:
        raise ToolError(
            f"the frontmatter of {SKILL_FILE} does not end within its first "
            f"{MAX_FRONTMATTER_BYTES:,} bytes"
        )
    header = _frontmatter(text, folder)
    declared = header.get("name")
    if not isinstance(declared, str) or not declared.strip():
        raise ToolError(f"{SKILL_FILE} has no name in its frontmatter")
    if declared.strip() != name:
        raise ToolError(
            f"{SKILL_FILE} names the skill {clip(one_line(declared), 80)!r}, but its folder "
            f"is {name!r}; they must be the same"
        )
    description = header.get("description")
    if not isinstance(description, str) or not one_line(description):
        raise ToolError(f"{SKILL_FILE} has no description in its frontmatter")
    return Skill(
        name=name,
        description=clip(one_line(description), MAX_DESCRIPTION_CHARS),
        folder=folder,
        real_folder=real,
    )


def _frontmatter(text: str, folder: str) -> dict[str, Any]:
    parts = split_frontmatter(text)
    if parts is None:
        raise ToolError(
            f"{SKILL_FILE} has no YAML frontmatter: it must start with a '---' line, then "
            "'name: …' and 'description: …', then a closing '---' line"
        )
    try:
        data: Any = yaml.safe_load(parts[0]) if parts[0].strip() else {}
    except YAML_FAILURES as exc:
        # As for agent files: Claude Code reads `description: Use when: …` line by line.
        lenient = read_leniently(parts[0])
        if lenient is None:
            raise ToolError(
                f"the frontmatter of {SKILL_FILE} is not valid YAML ({yaml_problem(exc)}), "
                "and it does not start with a 'key: value' line either"
            ) from exc
        data = lenient[0]
        logger.warning(
            "skill %s: %s read as Claude Code reads it (the frontmatter is not strict YAML: %s)",
            folder,
            ", ".join(lenient[1]) or "the frontmatter",
            yaml_problem(exc),
        )
    if not isinstance(data, dict):
        raise ToolError(f"the frontmatter of {SKILL_FILE} must be a mapping of keys to values")
    return data


def _body(text: str) -> tuple[str, int]:
    """The instructions after the frontmatter, and the line of the file they start on."""
    parts = split_frontmatter(text)
    rest = parts[1] if parts else text  # the end of `text`, as split
    start = len(text) - len(rest.lstrip())
    return rest.strip(), text[:start].count("\n") + 1


def _real_folder(
    workspace: Workspace, folder: str, *, links_to_files_ok: bool = False
) -> tuple[str, ...] | None:
    """Where a skill folder really lies: a directory right inside a skills directory.

    Raises:
        ToolError: It leads out of the workspace, or to a directory that is not a
            skill folder (a link to `src/`, to the workspace root, ...).
    """
    with workspace.locate(folder) as found:
        if not found.exists:
            raise ToolError(f"{folder} does not exist")
        assert found.stat is not None
        if not stat.S_ISDIR(found.stat.st_mode):
            if links_to_files_ok:
                return None
            raise ToolError(f"{folder} is not a directory")
        parts = found.parts
    if len(parts) != 3 or parts[:2] not in SKILL_ROOTS:
        raise ToolError(
            f"{folder} leads to {'/'.join(parts) or '.'}, outside .baton/skills and "
            ".claude/skills; a skill folder must lie in one of them"
        )
    return parts


def _open_in_skill(
    workspace: Workspace, real_folder: tuple[str, ...], file: str, *, hide: Sequence[str]
) -> Opened:
    """Open `file`, relative to a skill's real folder, as a regular file really inside it.

    Raises:
        ToolError: Absolute, `..`, out of the folder (through a link too), not a
            regular file, secret-looking, hidden by a deny rule, or hard-linked.
    """
    check_path_text(file)
    if file.startswith("/"):
        raise ToolError("file must be a path relative to the skill's folder, not an absolute path")
    if ".." in file.split("/"):
        raise ToolError("file must stay inside the skill's folder; '..' is not allowed")
    _refuse_secret(file)
    spelled = "/".join((*real_folder, file))
    _refuse_secret(spelled)
    opened = workspace.open_file(spelled, approved=person_approved.get())
    try:
        real = opened.path.relative_to(workspace.root).parts
        if len(real) <= len(real_folder) or real[: len(real_folder)] != real_folder:
            raise ToolError(
                f"{file!r} leads to {'/'.join(real)}, outside the skill's folder; "
                "a skill reads only its own files"
            )
        shown = "/".join(real)
        _refuse_secret(shown)
        if _hidden(shown, opened.path, hide):
            raise ToolError(f"{shown} is hidden by a deny rule; it cannot be read")
    except BaseException:
        opened.close()
        raise
    return opened


def _refuse_secret(path: str) -> None:
    if danger := find_path_danger(path):
        raise ToolError(f"refused: {danger.reason}")


def _hidden(relative: str, absolute: Path, hide: Sequence[str]) -> bool:
    """Whether a deny rule on reading names the file (`read_file(docs/private/**)`)."""
    spellings = (relative, str(absolute))
    return any(glob_to_regex(p, "path").fullmatch(s) for p in hide for s in spellings)


def _read_text(opened: Opened, *, binary_ok: bool, limit: int = MAX_READ_BYTES) -> tuple[str, bool]:
    """The text of an opened regular file, at most `limit` bytes of it, and whether
    there was more. Invalid UTF-8 is an error for SKILL.md, replaced elsewhere."""
    chunks: list[bytes] = []
    offset = 0
    while offset <= limit:
        chunk = os.pread(opened.fd, min(1 << 16, limit + 1 - offset), offset)
        if not chunk:
            break
        chunks.append(chunk)
        offset += len(chunk)
    data = b"".join(chunks)
    more = len(data) > limit
    data = data[:limit]
    if b"\x00" in data[:8192]:
        raise ToolError(f"{opened.shown} looks like a binary file; it cannot be shown")
    if binary_ok:
        return data.decode("utf-8", errors="replace"), more
    try:
        # Not final: a character cut at the limit is dropped, not an error.
        return codecs.getincrementaldecoder("utf-8")().decode(data, final=not more), more
    except UnicodeDecodeError as exc:
        raise ToolError(f"{opened.shown} is not UTF-8 text") from exc


def _shown_text(text: str, more: bool, size: int, shown: str, first_line: int = 1) -> str:
    """`text` (from line `first_line` of the file `shown`) cut to MAX_SHOWN_CHARS, saying
    where the rest is."""
    if len(text) <= MAX_SHOWN_CHARS and not more:
        return text
    kept = text[:MAX_SHOWN_CHARS]
    line = first_line + kept.count("\n")
    return (
        f"{kept}\n[… cut: {shown} is {size:,} bytes; read the rest with read_file "
        f"path={shown} offset={line}]"
    )


def _list_files(
    workspace: Workspace, real_folder: tuple[str, ...], hide: Sequence[str]
) -> tuple[list[tuple[str, int]], bool]:
    """The regular files of a skill folder but SKILL.md (relative path, size), and
    whether that is all of them (the walk stops after MAX_SCANNED_ENTRIES). Links are
    not followed; secret and hidden files are left out."""
    opened = workspace.open_dir("/".join(real_folder))
    private = workspace.guard().private_ids
    files: list[tuple[str, int]] = []
    scanned = 0
    try:
        walker = os.fwalk(".", dir_fd=opened.fd, follow_symlinks=False)
        with contextlib.closing(walker):
            for directory, dirs, names, dir_fd in walker:
                dirs.sort()
                for name in sorted(names):
                    scanned += 1
                    if scanned > MAX_SCANNED_ENTRIES:
                        return files, False
                    relative = os.path.normpath(os.path.join(directory, name))
                    if relative == SKILL_FILE:
                        continue
                    try:
                        st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
                    except OSError:
                        continue
                    whole = "/".join((*real_folder, relative))
                    if (
                        not stat.S_ISREG(st.st_mode)
                        or identity(st) in private
                        or find_path_danger(whole) is not None
                        or _hidden(whole, workspace.root / whole, hide)
                    ):
                        continue
                    files.append((relative, st.st_size))
    finally:
        opened.close()
    return files, True


class SkillCatalog:
    """The skills of one workspace, kept current with the files on disk.

    `current()` rescans only when the skill directories changed (their entries, each
    SKILL.md's size and mtime), so a teammate's new skill shows up without a restart.
    Each invalid or shadowed skill is logged once.
    """

    def __init__(self, workspace: Workspace) -> None:
        self.workspace = workspace
        self._signature: tuple[tuple[Any, ...], ...] | None = None
        self._found = FoundSkills()
        self._logged: set[tuple[str, str]] = set()

    def current(self) -> FoundSkills:
        signature = self._scan()
        if signature != self._signature:
            found = find_skills(self.workspace)
            self._found, self._signature = found, signature
            self._log(found)
        return self._found

    def _scan(self) -> tuple[tuple[Any, ...], ...]:
        entries: list[tuple[Any, ...]] = []
        for root in SKILL_ROOTS:
            directory = self.workspace.root.joinpath(*root)
            try:
                with os.scandir(directory) as it:
                    names = sorted((entry.name, entry.inode(), entry.is_symlink()) for entry in it)
            except OSError:
                entries.append((str(directory), None))
                continue
            entries.append((str(directory), len(names)))
            for name, inode, link in names[: MAX_SKILL_FOLDERS + 1]:
                path = directory / name
                target = _readlink(path) if link else None
                try:
                    st = os.stat(path / SKILL_FILE)
                    entries.append((name, inode, target, st.st_size, st.st_mtime_ns, st.st_ino))
                except OSError:
                    entries.append((name, inode, target))
        return tuple(entries)

    def _log(self, found: FoundSkills) -> None:
        for bad in found.invalid:
            if (bad.path, bad.reason) not in self._logged:
                self._logged.add((bad.path, bad.reason))
                logger.warning("skipping skill %s: %s", bad.path, bad.reason)
        for lost in found.shadowed:
            if (lost.source, lost.shadowed_by) not in self._logged:
                self._logged.add((lost.source, lost.shadowed_by))
                logger.info(
                    "skill %r from %s is shadowed by %s", lost.name, lost.source, lost.shadowed_by
                )


def _readlink(path: Path) -> str | None:
    try:
        return os.readlink(path)
    except OSError:
        return None


class SkillArgs(ToolArguments):
    name: str = Field(max_length=200, description="The skill's name, as listed.")
    file: str | None = Field(
        default=None,
        max_length=1_000,
        description="A file of the skill to read, relative to its folder (e.g. "
        "reference.md). Leave out to load the skill's instructions.",
    )


class SkillTool(Tool):
    """`skill`: the skills' names and descriptions in its description, and their
    instructions and files on demand.

    `allowed` limits which skills it offers and loads (an agent file's `skills`); None
    offers every skill.
    """

    name = SKILL_TOOL_NAME
    description = "Load a skill by name."
    arguments = SkillArgs
    # It only reads, inside the skill folders: no rule needed, never asks.
    read_only = True
    main_argument = "name"
    argument_kind = "pattern"

    def __init__(
        self,
        workspace: Workspace,
        *,
        hide: Sequence[str] = (),
        catalog: SkillCatalog | None = None,
        allowed: frozenset[str] | None = None,
    ) -> None:
        """`hide`: the globs of deny rules on reading; the files they match are refused."""
        self.workspace = workspace
        self.hide = tuple(hide)
        self.catalog = catalog if catalog is not None else SkillCatalog(workspace)
        self.allowed = allowed

    def limited(self, names: Sequence[str]) -> SkillTool:
        """The same tool offering only `names` (and only those this one offers)."""
        wanted = frozenset(names)
        allowed = wanted if self.allowed is None else self.allowed & wanted
        return SkillTool(self.workspace, hide=self.hide, catalog=self.catalog, allowed=allowed)

    def skills(self) -> tuple[Skill, ...]:
        """The skills this tool offers now."""
        found = self.catalog.current().skills
        return tuple(
            s
            for s in found
            if (self.allowed is None or s.name in self.allowed)
            and not _hidden(s.source, self.workspace.root / s.source, self.hide)
        )

    def schema(self) -> dict[str, Any]:
        # Rebuilt on every call, so skills added or fixed since start-up appear.
        schema = super().schema()
        schema["function"]["description"] = TOOL_DESCRIPTION.format(
            skills=render_listing(self.skills())
        )
        return schema

    async def run(self, args: SkillArgs) -> str:
        return await asyncio.to_thread(self._load, args.name, args.file)

    def preload(self, name: str) -> str | None:
        """The skill's instructions and the list of its files, for an agent without the
        `skill` tool (as Claude Code puts an agent file's skills in its context when it
        starts); None when this tool offers no such skill or cannot read it."""
        skill = next((s for s in self.skills() if s.name == name), None)
        if skill is None:
            return None
        how = "read them with read_file, if you have it"
        try:
            return self._instructions(skill, how)
        except (ToolError, OSError):
            return None

    def _load(self, name: str, file: str | None) -> str:
        offered = self.skills()
        skill = next((s for s in offered if s.name == name), None)
        if skill is None:
            names = ", ".join(s.name for s in offered[:MAX_LISTED_SKILLS]) or "none"
            raise ToolError(f"no skill named {clip(name, 80)!r}; available: {names}")
        if file is not None:
            real = _real_folder(self.workspace, skill.folder)
            assert real is not None
            return self._read_file(real, file)
        return self._instructions(skill, f"read them with skill(name={skill.name!r}, file=<path>)")

    def _instructions(self, skill: Skill, how: str) -> str:
        """SKILL.md's body and the files of the skill's folder; `how` says how to read
        those files."""
        real = _real_folder(self.workspace, skill.folder)
        if real is None:
            raise ToolError(f"the folder of skill {skill.name!r} is not where it was found")
        opened = _open_in_skill(self.workspace, real, SKILL_FILE, hide=self.hide)
        try:
            text, more = _read_text(opened, binary_ok=False)
            size = opened.stat.st_size
        finally:
            opened.close()
        body, first_line = _body(text)
        shown = "/".join((*real, SKILL_FILE))
        lines = [
            f"Skill {skill.name} ({skill.source}). Paths it names are relative to its folder, "
            f"{skill.folder}/; {how}.",
            "",
            _shown_text(body, more, size, shown, first_line)
            if body
            else f"({SKILL_FILE} holds no instructions after its frontmatter)",
        ]
        files, complete = _list_files(self.workspace, real, self.hide)
        if files:
            lines += ["", "Files in its folder:"]
            lines += [f"- {path} ({size:,} bytes)" for path, size in files[:MAX_LISTED_FILES]]
            if not complete or len(files) > MAX_LISTED_FILES:
                left = len(files) - MAX_LISTED_FILES
                count = f"{left:,} " if complete else ""
                lines.append(f"[… {count}more files not listed; list_dir {skill.folder}]")
        return "\n".join(lines)

    def _read_file(self, real: tuple[str, ...], file: str) -> str:
        opened = _open_in_skill(self.workspace, real, file, hide=self.hide)
        try:
            text, more = _read_text(opened, binary_ok=True)
            size = opened.stat.st_size
        finally:
            opened.close()
        shown = "/".join(opened.path.relative_to(self.workspace.root).parts)
        if not text:
            return f"{shown} is empty"
        return _shown_text(text, more, size, shown)


def render_listing(skills: Sequence[Skill]) -> str:
    """`- name: description` per skill, descriptions clipped, the list capped."""
    lines: list[str] = []
    used = 0
    for skill in skills:
        line = f"- {skill.name}: {clip(skill.description, SHOWN_DESCRIPTION_CHARS)}"
        if len(lines) >= MAX_LISTED_SKILLS or used + len(line) > MAX_LISTING_CHARS:
            break
        lines.append(line)
        used += len(line) + 1
    if not lines:
        return NO_SKILLS
    if left := len(skills) - len(lines):
        lines.append(
            f"[… {left} more skills not listed; list_dir .baton/skills and .claude/skills "
            "to see them]"
        )
    return "\n".join(lines)
