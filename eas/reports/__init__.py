"""Pure views of a stored study, shared by the CLI and the explorer: the Pareto and
hypervolume maths (pareto), fronts, knee and picks (front), printed summaries, figures, the
explorer's tables, the progress line and the lineage of exports. Nothing here runs a search."""
