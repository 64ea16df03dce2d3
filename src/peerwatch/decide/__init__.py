"""What decides, apart from scoring: the policy (findings -> alarms), the diagnosers (findings of
one incident -> a failure type of GUIDE 3.1, with where the cause is), severities and actions."""
