"""The start screen: every lesson, the race and a teacher's recordings, one line each; Enter plays the one chosen.

It is what a tab of ``decode-tui serve`` opens on, and what ``decode-tui lessons``
opens in a terminal. It returns the chosen entry's key (tui/catalog.py), or None
when the user leaves; whoever opened it plays the entry. An entry that cannot be
played (an unreadable recording) is listed with its reason and cannot be chosen.
"""

from __future__ import annotations

from typing import ClassVar

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.screen import Screen
from textual.widgets import Footer, OptionList, Static
from textual.widgets.option_list import Option

from ..catalog import Entry, printable

KINDS = {"lesson": "Lessons", "race": "The race", "recording": "Recordings"}


def entry_prompt(entry: Entry) -> Text:
    """An entry's two lines: its title and mode, then what it is (or why it cannot be played)."""
    # Each line cut with an ellipsis where the list is narrower (80 columns), never wrapped into a third.
    text = Text(entry.title, style="bold", no_wrap=True, overflow="ellipsis")
    if entry.mode:
        text.append(f"  {entry.mode}", style="italic")
    if entry.problem is not None:
        text.append(f"\n  unreadable: {entry.problem}", style="italic")
    else:
        text.append(f"\n  {entry.line}", style="dim")
    return text


class StartList(OptionList):
    """The list, whose Enter (select, which plays the entry) the footer offers as Play: OptionList's own Enter is
    not shown, and as the focused widget's it hid the screen's from the footer."""

    BINDINGS: ClassVar[list[BindingType]] = [Binding("enter", "select", "Play", id="start.play")]


class StartScreen(Screen[str | None]):
    CSS_PATH = "start.tcss"
    AUTO_FOCUS = "#start-list"
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("l", "live", "Run it on the model", id="start.live"),
        Binding("q,escape", "leave", "Leave", id="start.leave"),
    ]

    def __init__(self, offered: list[Entry], *, notice: str | None = None, where: str = "",
                 live: bool = False, highlight: str | None = None) -> None:
        """``live``: whether l may run the highlighted lesson on a model instead of playing its recording.
        ``highlight``: the key of the entry to start on (the one played last), where it is on the list."""
        super().__init__()
        self.offered = offered
        self.notice = notice
        self.where = where  # what the header says it is (the server's title, say)
        self.live = live
        self.highlight = highlight.replace("live:", "lesson:", 1) if highlight else None

    def compose(self) -> ComposeResult:
        yield Static(Text.assemble(("decode-tui", "bold"), f"  {self.where}".rstrip(), "\n",
                                   "Choose one with ↑ ↓ and Enter", ", or l to run a lesson on the model" if self.live
                                   else "", ". In a lesson, n steps and space plays; q comes back to this list."),
                         id="start-header")
        if self.notice:
            yield Static(Text(printable(self.notice)), id="start-notice")  # words, never markup
        options: list[Option | None] = []
        kind = None
        for entry in self.offered:
            if entry.kind != kind:
                kind = entry.kind
                options.append(Option(Text(KINDS.get(kind, kind), style="bold underline"), disabled=True))
            options.append(Option(entry_prompt(entry), id=entry.key, disabled=not entry.playable))
        listing = StartList(*options, id="start-list")
        # Highlighted as it is made, not once mounted: a key that comes with the first frame (a browser's tab gets
        # it at once) finds the list ready.
        playable = [i for i, option in enumerate(options) if option is not None and not option.disabled]
        last = [i for i in playable if (option := options[i]) is not None and option.id == self.highlight]
        listing.highlighted = next(iter(last or playable), None)
        yield listing
        yield Footer()

    def on_option_list_option_selected(self, event: OptionList.OptionSelected) -> None:
        event.stop()
        self.dismiss(event.option.id)

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        return self.live if action == "live" else True

    def action_live(self) -> None:
        listing = self.query_one(OptionList)
        if listing.highlighted is None:
            return
        key = listing.get_option_at_index(listing.highlighted).id or ""
        if key.startswith("lesson:"):
            self.dismiss("live:" + key.removeprefix("lesson:"))
        else:
            self.notify("Only a lesson runs on the model; this one plays its recording (Enter).", severity="warning")

    def action_leave(self) -> None:
        self.dismiss(None)
