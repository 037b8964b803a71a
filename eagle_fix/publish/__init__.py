"""Stage 11, what people see: the report's tables and plots, the docs' generated tables, the dashboard."""
