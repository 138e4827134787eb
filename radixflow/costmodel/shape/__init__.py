"""What a model is to the cost model: layers and mixers, the chunks a round computes, the sim catalogue."""
