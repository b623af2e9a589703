"""The Streamlit Pareto explorer (`eas ui`): app.py, the pages in app_pages/, common.py."""
