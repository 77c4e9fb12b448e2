DROP TABLE diesel_photos; -- and its OWNED BY sequence
