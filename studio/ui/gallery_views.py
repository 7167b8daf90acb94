"""History's gallery: the images of the runs a History view shows (the run log's rows the table shows, so a
visitor's own alone on a public studio), newest first, each captioned with its prompt, configuration and
latency; the run behind a picked image, in words; and the prompt as the table shows it."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from PIL import Image

from studio import report

log = logging.getLogger(__name__)
GALLERY_SIZE = 48  # the newest images shown at most: a long view's older runs stay in the table
TABLE_PROMPT = 40  # characters of a prompt in the table's column
CAPTION_PROMPT = 32  # characters of a prompt under a thumbnail
THUMBNAIL_SIDE = 320  # px: the longer edge of a thumbnail (a smaller image enlarged, a larger one shrunk)
LARGE_SIDE = 320  # px: a smaller image is enlarged to this where it shows large (its place's height)
NOTHING_PICKED = "Pick an image to see it large with the settings of the run that made it."
MARKDOWN = set("\\`*_{}[]<>()#+-!|~")  # escaped in a prompt shown word for word


def shortened(text: str | None, limit: int) -> str:
    """`text` on one line, cut after its last whole word within `limit` characters with '…' ('' for none)."""
    words = " ".join((text or "").split())
    if len(words) <= limit:
        return words
    head = words[: limit - 1]  # room for the '…'
    if words[limit - 1] != " " and " " in head:  # a word cut in two goes whole
        head = head.rsplit(" ", 1)[0]
    return head.rstrip(" ,;:.") + "…"


def table_prompts(rows: list[dict[str, Any]]) -> list[str]:
    """The History table's Prompt column: each run's prompt, shortened."""
    return [shortened(row.get("prompt"), TABLE_PROMPT) or "–" for row in rows]


def image_paths(row: dict[str, Any]) -> list[str]:
    """Where a logged run's images were saved (every image of a batch), as its run-log row names them."""
    return list(row.get("image_paths") or ([row["image_path"]] if row.get("image_path") else []))


def latency_words(record: dict[str, Any]) -> str:
    """'0.12 s', or with a batch '0.40 s per call of 4 (0.10 s per image)'."""
    said = report.seconds(record["latency_s"])
    if (record.get("batch") or 1) > 1 and record.get("seconds_per_image") is not None:
        said += f" per call of {record['batch']} ({report.seconds(record['seconds_per_image'])} per image)"
    return said


def caption(row: dict[str, Any], record: dict[str, Any], index: int, count: int) -> str:
    """A thumbnail's caption: the prompt shortened, then the configuration and latency per image (with the
    image's place in its batch)."""
    per_image = record.get("seconds_per_image") or record["latency_s"]
    place = f" · {index + 1} of {count}" if count > 1 else ""
    prompt = shortened(row.get("prompt"), CAPTION_PROMPT) or "(no prompt)"
    return f"{prompt} · {record['config'] or 'baseline'} · {report.seconds(per_image)}{place}"


def opened(path: Path) -> Image.Image | None:
    """The image at `path`, read whole (its file closed); None when its file is gone (deleted with its
    visitor's history, or by the retention) or cannot be read (said in the log)."""
    if not path.is_file():
        return None
    try:
        with Image.open(path) as image:
            image.load()
            return image.copy()
    except OSError as exc:
        log.warning("History leaves out the image %s: it cannot be read (%s)", path, exc)
        return None


def fitted(image: Image.Image, side: int, shrink: bool) -> Image.Image:
    """`image` to be shown `side` px on its longer edge: a smaller one enlarged by a whole factor, each pixel
    copied (nearest neighbour: the bundled model's 64x64 shows crisp, not blurred by the browser's scaling);
    a larger one shrunk to fit where `shrink` (a thumbnail: a page of them stays small), else as it is."""
    longer = max(image.size)
    if longer > side:
        if shrink:
            image.thumbnail((side, side))
        return image
    factor = -(-side // longer)
    return image.resize((image.width * factor, image.height * factor), Image.Resampling.NEAREST)


def image_of(row: dict[str, Any], number: int, side: int, shrink: bool = False) -> Image.Image | None:
    """A logged run's image `number` (its place in the batch), as its row names it, `fitted` to `side`;
    None when it is gone."""
    paths = image_paths(row)
    image = opened(Path(paths[number])) if number < len(paths) else None
    return None if image is None else fitted(image, side, shrink)


def gallery_of(rows: list[dict[str, Any]], records: list[dict[str, Any]]) -> dict[str, Any]:
    """The gallery of these runs (the run-log rows a History view shows and their records, newest first):
    `gallery`, up to `GALLERY_SIZE` (image, caption) pairs, and `images`, the run behind each and the image's
    place in its batch. An image whose file is gone is left out."""
    items: list[tuple[Image.Image, str]] = []
    images: list[list[int]] = []
    for row, record in zip(rows, records, strict=True):
        paths = image_paths(row)
        for number in range(len(paths)):
            if len(items) == GALLERY_SIZE:
                return {"gallery": items, "images": images}
            image = image_of(row, number, THUMBNAIL_SIDE, shrink=True)
            if image is not None:
                items.append((image, caption(row, record, number, len(paths))))
                images.append([row["id"], number])
    return {"gallery": items, "images": images}


def _plain(value: Any) -> str:
    """A value as Markdown shows it word for word: on one line, its Markdown characters escaped ('–' for
    none)."""
    if value in (None, ""):
        return "–"
    text = " ".join(str(value).split())
    return "".join(f"\\{c}" if c in MARKDOWN else c for c in text)


def _number(value: float | None) -> str | None:
    """A number without a whole float's '.0' (guidance 6, 7.5)."""
    return None if value is None else f"{value:g}"


def picked_words(row: dict[str, Any]) -> str:
    """The run behind a picked image, in words: its model, configuration, prompt, seed, steps, size,
    scheduler and latency."""
    record = report.log_record(row)
    when = (row.get("created_at") or "")[:16].replace("T", " ")
    negative = row.get("negative_prompt")
    config = row.get("config_label") or "baseline"
    lines = [
        f"**Run #{row['id']}** · {_plain(when)} · {_plain(row.get('status'))}",
        f"**Prompt:** {_plain(row.get('prompt'))}",
        *([f"**Negative prompt:** {_plain(negative)}"] if negative else []),
        f"**Model:** {_plain(row.get('model'))} · **Configuration:** `{config}`",
        f"**Seed:** {_plain(row.get('seed'))} · **Steps:** {_plain(row.get('steps'))} · "
        f"**Size:** {_plain(row.get('width'))} × {_plain(row.get('height'))}",
        f"**Scheduler:** {_plain(row.get('scheduler') or 'default')} · "
        f"**Guidance:** {_plain(_number(row.get('guidance')))}",
        f"**Latency:** {latency_words(record)} on {_plain(row.get('device'))}",
    ]
    return "  \n".join(lines)
