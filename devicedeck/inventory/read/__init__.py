"""The read side: device-plugin devices, nodes, pods, histories, charts and the overview, one
function per question, shared by the JSON API and the dashboard."""
