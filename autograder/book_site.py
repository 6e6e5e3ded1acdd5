"""The book's own Sphinx extension (``_config.yml`` lists it): the book's site is where a reader gets the course.

- After an HTML build, the site gets the learner kit (:func:`autograder.kit.build_site_files`): the
  ``attention_course`` wheel at ``wheels/<wheel>`` and the whole kit at ``attention-kit.zip``, built from the same
  ``chapters/`` and ``attention_course/`` as the pages, so the site never offers a stale or hand-copied kit.
- The ``{course-kit}`` directive puts "Get the course kit" (:func:`autograder.kit.install_markdown`, the one text)
  on a page that is not a chapter's notebook: the front page. A chapter's page shows the same text as its
  notebook's first cell (autograder/release.py writes it there).
- "Launch on JupyterHub" is sphinx-book-theme's launch button with nbgitpuller (``_config.yml``:
  ``repository: url`` and ``launch_buttons: jupyterhub_url``). Both empty, the default: no launch button at all.
  One without the other would give a dead link (the theme even fails on it), so the build stops and says which
  is missing. A repository on a host the theme does not know (a university's git server) works too: the theme
  wants a provider name only for its edit and source buttons, which this book does not show.
- The book has two editions (autograder/book_editions.py): every page gets ``language_switch``, the link to the same
  page in the other edition (``book_templates/language-switch.html`` shows it in the article's header), and an
  ``hreflang`` alternate link in its head. The Chinese edition is built from a generated source tree, so
  ``course_root`` (set by book_editions) names the course its kit and install text come from. Each edition hands
  out the kit in its language (``python -m autograder kit --lang zh``: the Chinese releases and README, messages in
  Chinese by default) and says how to install it in that language (``kit.po``).
"""
from __future__ import annotations

from urllib.parse import urlsplit

from docutils import nodes
from docutils.statemachine import StringList
from sphinx.application import Sphinx
from sphinx.errors import ConfigError
from sphinx.util.docutils import SphinxDirective

from . import book_editions, kit
from .course import Course

# Hosts whose provider sphinx-book-theme infers from the repository URL itself.
KNOWN_PROVIDERS = ("github", "gitlab", "bitbucket")


class CourseKit(SphinxDirective):
    """```{course-kit}``` renders the install text, its links relative to the page that holds it."""

    has_content = False

    def run(self) -> list[nodes.Node]:
        to_root = "../" * self.env.docname.count("/")
        course = course_of(self.config, self.env.srcdir)
        template = kit.texts_in(course, kit_language(self.config)).install  # the edition's language (kit.po)
        text = kit.install_markdown(kit.wheel_filename(course), to_root, template)
        box = nodes.container(classes=["course-kit"])
        self.state.nested_parse(StringList(text.splitlines(), source=self.env.docname), self.content_offset, box)
        return [box]


def course_of(config, srcdir) -> Course:
    """The course the book is built from: its source folder, or ``course_root`` for a generated edition's."""
    return Course(config.course_root or srcdir)


def kit_language(config) -> str | None:
    """The language of the kit an edition hands out: its catalogues' (``zh_CN``), None for English."""
    return book_editions.edition_of(config.language).locale or None


def add_language_switch(app: Sphinx, pagename: str, templatename: str, context: dict, doctree) -> None:
    """The link from this page to the same page in the book's other edition, for the header and the head."""
    edition = book_editions.edition_of(app.config.language)
    other = book_editions.other_edition(edition)
    href = book_editions.switch_href(edition, app.builder.get_target_uri(pagename))
    context["language_switch"] = {"href": href, "label": other.label, "title": other.switch_title,
                                  "hreflang": other.hreflang}
    context["metatags"] = (context.get("metatags") or "") + (
        f'\n    <link rel="alternate" hreflang="{other.hreflang}" href="{href}" />')


def check_launch_settings(app: Sphinx, config) -> None:
    """Both launch settings or neither (see the module's docstring); a provider name for an unknown host."""
    options = config.html_theme_options
    repository = (options.get("repository_url") or "").strip()
    hub = ((options.get("launch_buttons") or {}).get("jupyterhub_url") or "").strip()
    if bool(repository) != bool(hub):
        missing = "launch_buttons: jupyterhub_url" if repository else "repository: url"
        raise ConfigError(f"_config.yml: the JupyterHub launch link needs both repository: url and launch_buttons: "
                          f"jupyterhub_url; {missing} is empty (leave both empty for a book without launch links)")
    if repository and not options.get("repository_provider"):
        host = urlsplit(repository).hostname or ""
        if not any(name in host.lower() for name in KNOWN_PROVIDERS):
            options["repository_provider"] = "github"  # a name for the theme's context keys, not a claim of host


def add_kit_to_site(app: Sphinx, exception: Exception | None) -> None:
    if exception is None and app.builder.format == "html":
        kit.build_site_files(course_of(app.config, app.srcdir), app.outdir, kit_language(app.config))


def setup(app: Sphinx) -> dict:
    app.add_directive("course-kit", CourseKit)
    app.add_config_value("course_root", "", "env", types=[str])
    app.connect("html-page-context", add_language_switch)
    app.connect("config-inited", check_launch_settings)
    app.connect("build-finished", add_kit_to_site)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
