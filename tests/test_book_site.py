"""The book as the front door, what needs no build (tests/test_book.py checks the built site): every released
notebook opens with "Get the course kit", the one text kit.install_markdown writes, and the book's launch settings
are both given or both left out."""
from __future__ import annotations

from types import SimpleNamespace

import nbformat
import pytest
import yaml
from sphinx.errors import ConfigError

from attention_course.cells import grade_id
from autograder import book_site, kit
from autograder.course import Course

pytestmark = pytest.mark.unit

COURSE = Course()
CHAPTERS = COURSE.chapters()


@pytest.mark.parametrize("chapter", CHAPTERS)
def test_every_release_opens_with_the_kit_cell(chapter):
    """The first cell says what to install, in the words and with the links kit.install_markdown gives for a
    chapter's place in the site (the release command writes it; nobody copies it): a markdown cell outside
    nbgrader's view (no grading metadata, an id no other cell has)."""
    nb = nbformat.read(COURSE.release_notebook(chapter), as_version=4)
    first = nb.cells[0]
    assert first.cell_type == "markdown" and first.id == kit.KIT_CELL_ID
    assert first.source == kit.install_markdown(kit.wheel_filename(COURSE), "../../")
    assert "nbgrader" not in first.metadata and grade_id(first) is None
    assert [c.id for c in nb.cells].count(kit.KIT_CELL_ID) == 1
    assert kit.pip_line(kit.wheel_filename(COURSE)) in first.source


def test_the_install_text_links_beside_the_page_and_installs_the_wheel_it_links():
    text = kit.install_markdown("attention_course-9.9-py3-none-any.whl", "../../")
    assert '<a href="../../wheels/attention_course-9.9-py3-none-any.whl">' in text
    assert '<a href="../../attention-kit.zip">' in text
    assert (f"pip install --extra-index-url {kit.CPU_TORCH_INDEX} attention_course-9.9-py3-none-any.whl"
            in text.splitlines())


def _config(repository: str = "", hub: str = "", **more) -> SimpleNamespace:
    return SimpleNamespace(html_theme_options={"repository_url": repository,
                                               "launch_buttons": {"jupyterhub_url": hub}, **more})


def test_the_shipped_config_has_both_launch_urls_empty():
    config = yaml.safe_load((COURSE.root / "_config.yml").read_text())
    assert config["repository"]["url"] == "" and config["launch_buttons"]["jupyterhub_url"] == ""
    assert "autograder.book_site" in config["sphinx"]["config"]["extensions"]


@pytest.mark.parametrize("repository, hub, missing", [
    ("https://github.com/someone/attention-kit", "", "jupyterhub_url"),
    ("", "https://hub.example.edu", "repository: url"),
])
def test_one_launch_url_without_the_other_stops_the_build(repository, hub, missing):
    """The theme would build a link without a repository (it fails on it) or never show the hub: say so."""
    with pytest.raises(ConfigError, match=missing):
        book_site.check_launch_settings(None, _config(repository, hub))


def test_both_or_neither_launch_url_builds():
    neither = _config()
    book_site.check_launch_settings(None, neither)
    assert "repository_provider" not in neither.html_theme_options
    github = _config("https://github.com/someone/attention-kit", "https://hub.example.edu")
    book_site.check_launch_settings(None, github)
    assert "repository_provider" not in github.html_theme_options  # the theme infers it
    own_host = _config("http://127.0.0.1:8722/course/attention-kit", "https://hub.example.edu")
    book_site.check_launch_settings(None, own_host)
    assert own_host.html_theme_options["repository_provider"]  # else the theme stops: "Provider not recognized"
    given = _config("https://git.uni.example/course/attention-kit", "https://hub.example.edu",
                    repository_provider="gitlab")
    book_site.check_launch_settings(None, given)
    assert given.html_theme_options["repository_provider"] == "gitlab"
