"""AnimeGamer's decoder pipeline: representation + motion level → an animation shot."""
