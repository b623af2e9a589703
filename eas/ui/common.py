"""Shared by the explorer's pages: cached, read-only loading and the selected study."""

from __future__ import annotations

import os

import streamlit as st

from eas.errors import UserError
from eas.reports.explorer import markdown_text, trial_rows
from eas.reports.front import hypervolume_history
from eas.study.reader import StudyReader, list_studies


def storage() -> str | None:
    return os.environ.get("EAS_UI_STORAGE") or None


@st.cache_data(ttl=15, show_spinner="Reading studies…")
def cached_studies(url: str | None) -> list[dict]:
    return list_studies(url)


@st.cache_resource(max_entries=16)
def study_reader(url: str, name: str) -> StudyReader:
    """One incremental reader per study and server: a reload reads only what changed."""
    return StudyReader(url, name)


@st.cache_data(ttl=15, show_spinner="Loading trials…")
def cached_study(url: str, name: str):
    study = study_reader(url, name).loaded()
    return study, trial_rows(study.records, study.objectives)


@st.cache_data(ttl=60, show_spinner="Computing hypervolume history…")
def cached_history(url: str, name: str) -> list[dict]:
    study, _ = cached_study(url, name)
    # Drawn, not read: about 400 points suffice however many trials there are.
    return hypervolume_history(study.records, study.objectives, study.reference, max_points=400)


def selected_study():
    """The study picked on the Studies page; on a page opened directly, the only study there is
    or the most recently started one (said in a caption); None with a hint when there is none."""
    choice = st.session_state.get("study")
    if choice is None:
        try:
            rows = [r for r in cached_studies(storage()) if r["study"]]
        except UserError as error:
            st.error(str(error))
            return None
        if rows:
            latest = max(rows, key=lambda r: r.get("started_at") or 0.0)
            choice = st.session_state["study"] = (latest["url"], latest["study"])
            if len(rows) > 1:
                st.caption(markdown_text(f"Showing the most recently started study, {latest['study']}; pick "
                                         "another on the Studies page."))
    if choice is None:
        st.info("No EAS studies found. Run `eas search --space tiny --data digits --budget 1m` first.")
        return None
    try:
        return cached_study(*choice)
    except UserError as error:
        st.error(str(error))
        return None
