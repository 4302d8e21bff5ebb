"""`commbench fabric`: which GPU, link, NIC or node is slow, from every pair of ranks both ways.

Data flows one way: command and config (a FabricConfig nesting the LaunchConfig every benchmark has) ->
launch (command.launch_fabric, the one meeting point) -> schedule (which pairs, in which round) -> measure
(rows from rows.make_row, written as each round ends) -> matrices -> outliers (suspects) -> analysis
(the verdict, and the `fabric` part of results.json) -> tables (console, report) and heatmap (plot,
report). Everything after measuring reads rows only, so a saved file gives the same conclusions.
"""
