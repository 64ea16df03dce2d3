"""Diagnosers: findings of one incident -> a failure type of GUIDE 3.1, with where the cause is."""
